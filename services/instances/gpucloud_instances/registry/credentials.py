"""Registry credentials as tenants keep them: a login per registry, for private images.

Only a tenant admin adds or deletes one; every member sees them, without the
password, which is sealed at rest (`GPUCLOUD_REGISTRY_SECRETS_KEY`) and never
shown again. An instance, a job or a service whose image comes from the
credential's registry is pulled with it (pull_secrets.py).
"""

from __future__ import annotations

from gpucloud_libs.clock import aware, now
from gpucloud_libs.errors import Conflict, NotFound
from gpucloud_libs.identity import Identity
from gpucloud_libs.sealing import SecretBox

from ..documents import tenant_namespaces
from ..store import DuplicateInstance, instance_key
from ..tenancy.store import TenantStore
from . import manifests as registry_manifests
from .documents import RegistryCredentialDoc
from .pull_secrets import PullSecrets
from .schemas import RegistryCredential, RegistryCredentialCreate
from .store import RegistryCredentialStore


class RegistryCredentials:
    def __init__(
        self,
        credentials: RegistryCredentialStore,
        tenants: TenantStore,
        box: SecretBox,
        pull_secrets: PullSecrets,
    ) -> None:
        self._credentials = credentials
        self._tenants = tenants
        self._box = box
        self._pull_secrets = pull_secrets

    async def create(
        self, identity: Identity, body: RegistryCredentialCreate
    ) -> RegistryCredential:
        identity.require_role("tenant-admin")
        tenant_id = identity.require_tenant()
        doc: RegistryCredentialDoc = {
            "_id": instance_key(tenant_id, body.credential_id),
            "tenant_id": tenant_id,
            "credential_id": body.credential_id,
            "registry": body.registry.lower(),
            "username": body.username,
            "sealed_password": self._box.seal(body.password.get_secret_value()),
            "created_at": now(),
        }
        try:
            await self._credentials.insert(doc)
        except DuplicateInstance:
            raise Conflict(
                f"registry credential {body.credential_id!r} exists; delete it first",
                credential_id=body.credential_id,
            ) from None
        return _view(doc)

    async def list(self, identity: Identity) -> list[RegistryCredential]:
        return [_view(doc) for doc in await self._credentials.of_tenant(identity.require_tenant())]

    async def get(self, identity: Identity, credential_id: str) -> RegistryCredential:
        return _view(await self._owned(identity, credential_id))

    async def delete(self, identity: Identity, credential_id: str) -> None:
        identity.require_role("tenant-admin")
        doc = await self._owned(identity, credential_id)
        tenant = await self._tenants.get(doc["tenant_id"])
        if tenant is not None:
            for namespace in tenant_namespaces(tenant).values():
                await self._pull_secrets.remove(namespace, credential_id)
        await self._credentials.remove(doc["_id"])

    async def _owned(self, identity: Identity, credential_id: str) -> RegistryCredentialDoc:
        doc = await self._credentials.get(instance_key(identity.require_tenant(), credential_id))
        if doc is None:
            # Another tenant's credential and a missing one look the same.
            raise NotFound(f"registry credential {credential_id!r} does not exist")
        return doc


def _view(doc: RegistryCredentialDoc) -> RegistryCredential:
    return RegistryCredential(
        credential_id=doc["credential_id"],
        registry=doc["registry"],
        username=doc["username"],
        secret_name=registry_manifests.pull_secret_name(doc["credential_id"]),
        created_at=aware(doc["created_at"]),
    )
