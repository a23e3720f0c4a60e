"""Request and response models of the registry credentials API."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import (
    Field,
    SecretStr,
)

from gpucloud_libs.http import ApiModel

from ..schemas import InstanceId

#: A registry host as image references name it: `nvcr.io`, `ghcr.io`, `registry:5000`.
RegistryHost = Annotated[
    str, Field(pattern=r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?(:[0-9]{1,5})?$", max_length=260)
]


class RegistryCredentialCreate(ApiModel):
    credential_id: InstanceId = Field(alias="credentialID")
    #: Images whose reference starts with this host are pulled with this login
    #: (`docker.io` for Docker Hub's short names, like `library/ubuntu`).
    registry: RegistryHost
    username: str = Field(min_length=1, max_length=256)
    #: The password or access token (NGC: the API key, with username `$oauthtoken`).
    #: Sealed at rest; never shown again.
    password: SecretStr = Field(min_length=1, max_length=4096)


class RegistryCredential(ApiModel):
    credential_id: str = Field(alias="credentialID")
    registry: str
    username: str
    #: The image pull Secret made from it in the tenant's namespace.
    secret_name: str
    created_at: datetime
