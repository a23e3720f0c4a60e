"""The registry credentials' collection, the secrets encrypted."""

from __future__ import annotations

from pymongo.errors import DuplicateKeyError

from gpucloud_libs.mongo import Collection, Database, typed

from ..store import REGISTRY_CREDENTIALS, DuplicateInstance
from .documents import RegistryCredentialDoc


class RegistryCredentialStore:
    """Tenants' registry logins: inserted, read, deleted; never changed in place."""

    def __init__(self, db: Database) -> None:
        self._credentials: Collection[RegistryCredentialDoc] = typed(
            db, REGISTRY_CREDENTIALS, RegistryCredentialDoc
        )

    async def insert(self, doc: RegistryCredentialDoc) -> None:
        try:
            await self._credentials.insert_one(doc)
        except DuplicateKeyError as error:
            raise DuplicateInstance(str(error)) from error

    async def get(self, key: str) -> RegistryCredentialDoc | None:
        return await self._credentials.find_one({"_id": key})

    async def of_tenant(self, tenant_id: str) -> list[RegistryCredentialDoc]:
        docs = [doc async for doc in self._credentials.find({"tenant_id": tenant_id})]
        return sorted(docs, key=lambda doc: doc["_id"])

    async def for_registry(self, tenant_id: str, registry: str) -> list[RegistryCredentialDoc]:
        cursor = self._credentials.find({"tenant_id": tenant_id, "registry": registry})
        return sorted([doc async for doc in cursor], key=lambda doc: doc["_id"])

    async def remove(self, key: str) -> bool:
        return (await self._credentials.delete_one({"_id": key})).deleted_count == 1
