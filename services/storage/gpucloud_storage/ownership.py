"""A caller's storages: every capability finds a storage here, scoped by the caller's tenant.

A storage of another tenant and a missing one look the same (404).
"""

from __future__ import annotations

from gpucloud_libs.errors import Conflict, NotFound, ValidationFailed
from gpucloud_libs.identity import Identity

from .documents import StorageDoc
from .store import StorageStore, storage_key


class StorageNotReady(Conflict):
    code = "storage_not_ready"
    title = "Storage not ready"


class OwnedStorages:
    def __init__(self, storages: StorageStore) -> None:
        self._storages = storages

    async def get(self, identity: Identity, storage_id: str) -> StorageDoc:
        doc = await self._storages.get(storage_key(identity.require_tenant(), storage_id))
        if doc is None:
            raise NotFound(f"storage {storage_id!r} not found")
        return doc

    async def ready(
        self, identity: Identity, storage_id: str, kind: str | None = None
    ) -> StorageDoc:
        """The caller's storage, ready for use (and of `kind`, when given)."""
        doc = await self.get(identity, storage_id)
        if kind is not None and doc["kind"] != kind:
            raise ValidationFailed(
                f"storage {storage_id!r} is a {doc['kind']} storage; this needs an {kind} storage"
            )
        if doc["state"] != "ready":
            raise StorageNotReady(
                f"storage {storage_id!r} is {doc['state']}", state=doc["state"], retry_after_s=2
            )
        return doc
