"""The stored documents of registry credentials."""

from __future__ import annotations

from datetime import datetime
from typing import TypedDict


class RegistryCredentialDoc(TypedDict):
    """A tenant's login to a container registry; the password sealed (libs sealing)."""

    _id: str  # <tenant>/<credential>
    tenant_id: str
    credential_id: str
    #: The registry host (and port) images name: nvcr.io, ghcr.io, docker.io.
    registry: str
    username: str
    sealed_password: str
    created_at: datetime
