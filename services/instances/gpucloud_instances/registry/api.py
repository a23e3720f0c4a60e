"""HTTP routes of a tenant's registry credentials."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Response, status

from gpucloud_libs.http import CurrentIdentity, app_part

from .credentials import RegistryCredentials
from .schemas import RegistryCredential, RegistryCredentialCreate

router = APIRouter()

CredentialsPart = Annotated[RegistryCredentials, app_part(RegistryCredentials)]


@router.post(
    "/registry-credentials",
    status_code=status.HTTP_201_CREATED,
    tags=["registry-credentials"],
    summary="Keep a login to a container registry, for private images (tenant admin)",
)
async def create_registry_credential(
    body: RegistryCredentialCreate, identity: CurrentIdentity, credentials: CredentialsPart
) -> RegistryCredential:
    return await credentials.create(identity, body)


@router.get(
    "/registry-credentials",
    tags=["registry-credentials"],
    summary="The tenant's registry logins (never their passwords)",
)
async def list_registry_credentials(
    identity: CurrentIdentity, credentials: CredentialsPart
) -> list[RegistryCredential]:
    return await credentials.list(identity)


@router.get(
    "/registry-credentials/{credential_id}",
    tags=["registry-credentials"],
    summary="One registry login (never its password)",
)
async def get_registry_credential(
    credential_id: str, identity: CurrentIdentity, credentials: CredentialsPart
) -> RegistryCredential:
    return await credentials.get(identity, credential_id)


@router.delete(
    "/registry-credentials/{credential_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    tags=["registry-credentials"],
    summary="Forget a registry login and its pull Secret (tenant admin)",
)
async def delete_registry_credential(
    credential_id: str, identity: CurrentIdentity, credentials: CredentialsPart
) -> Response:
    await credentials.delete(identity, credential_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
