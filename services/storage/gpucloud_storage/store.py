"""All MongoDB access of the storage service.

One writer per document (FerretDB applies updates as read, modify, write):
a storage document is written by the API call that creates, changes or deletes
it, and by the sweep only once it has sat unfinished for a while; sampled
usage lives in its own collection, written by the sampler alone; accessors,
uploads and attachments are inserted and removed, never updated concurrently.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from datetime import datetime, timedelta

from pymongo import ASCENDING, IndexModel
from pymongo.errors import DuplicateKeyError

from gpucloud_libs.clock import now
from gpucloud_libs.locks import LeasedLocks
from gpucloud_libs.mongo import Collection, Database, Document, IndexPlan, typed

from .documents import AccessorDoc, AttachmentDoc, PresignerDoc, StorageDoc, TenantDoc, UploadDoc

TENANTS = "tenants"
STORAGES = "storages"
USAGE = "usage"
ACCESSORS = "accessors"
UPLOADS = "uploads"
ATTACHMENTS = "attachments"
QUOTA_LOCKS = "quota_locks"
#: A quota turn is a read of the tenant's storages and one write: far inside this.
QUOTA_LOCK_TTL = timedelta(seconds=10)

INDEXES: IndexPlan = {
    STORAGES: [
        IndexModel([("tenant_id", ASCENDING), ("storage_id", ASCENDING)], name="tenant_storage"),
        IndexModel([("state", ASCENDING)], name="state"),
    ],
    ACCESSORS: [
        IndexModel([("tenant_id", ASCENDING), ("storage_id", ASCENDING)], name="tenant_storage")
    ],
    ATTACHMENTS: [IndexModel([("tenant_id", ASCENDING)], name="tenant")],
}


def storage_key(tenant_id: str, storage_id: str) -> str:
    return f"{tenant_id}/{storage_id}"


class TenantStore:
    def __init__(self, db: Database) -> None:
        self._tenants: Collection[TenantDoc] = typed(db, TENANTS, TenantDoc)

    async def upsert(self, tenant_id: str, fields: Document) -> None:
        await self._tenants.update_one({"_id": tenant_id}, {"$set": fields}, upsert=True)

    async def get(self, tenant_id: str) -> TenantDoc | None:
        return await self._tenants.find_one({"_id": tenant_id})

    async def remove(self, tenant_id: str) -> None:
        await self._tenants.delete_one({"_id": tenant_id})


class StorageStore:
    def __init__(self, db: Database) -> None:
        self._storages: Collection[StorageDoc] = typed(db, STORAGES, StorageDoc)
        self._usage = db[USAGE]
        self._quota_locks = LeasedLocks(
            db[QUOTA_LOCKS], ttl=QUOTA_LOCK_TTL, wait_s=10.0,
            busy="the tenant's storage quota is busy with other changes; retry",
        )  # fmt: skip

    def quota_turn(self, tenant_id: str) -> AbstractAsyncContextManager[None]:
        """The tenant's turn to claim against its quota: one claim and check at a time."""
        return self._quota_locks.held(tenant_id)

    async def insert(self, doc: StorageDoc) -> bool:
        try:
            await self._storages.insert_one(doc)
        except DuplicateKeyError:
            return False
        return True

    async def get(self, key: str) -> StorageDoc | None:
        return await self._storages.find_one({"_id": key})

    async def update(self, key: str, fields: Document) -> StorageDoc | None:
        await self._storages.update_one({"_id": key}, {"$set": {**fields, "updated_at": now()}})
        return await self.get(key)

    async def set_presigner(
        self, key: str, *, expected: PresignerDoc | None, presigner: PresignerDoc | None
    ) -> bool:
        """Replace the storage's presigner if it is still `expected`; False if another
        request changed it first."""
        result = await self._storages.update_one(
            {"_id": key, "presigner": expected}, {"$set": {"presigner": presigner}}
        )
        return result.modified_count == 1

    async def reserve(self, key: str, request_id: str, size_bytes: int) -> None:
        """Hold `size_bytes` for one resize of storage `key` (see `held_bytes`)."""
        await self._storages.update_one(
            {"_id": key}, {"$set": {f"reservations.{request_id}": size_bytes}}
        )

    async def unreserve(self, key: str, request_id: str, fields: Document | None = None) -> None:
        """Drop one resize's hold, with what it changed (if it went through) in one write."""
        update: Document = {"$unset": {f"reservations.{request_id}": ""}}
        if fields:
            update["$set"] = {**fields, "updated_at": now()}
        await self._storages.update_one({"_id": key}, update)

    async def remove(self, key: str) -> None:
        await self._storages.delete_one({"_id": key})
        await self._usage.delete_one({"_id": key})

    async def of_tenant(self, tenant_id: str) -> list[StorageDoc]:
        return [doc async for doc in self._storages.find({"tenant_id": tenant_id})]

    async def page(
        self, tenant_id: str, *, after: str | None, limit: int, where: Document | None = None
    ) -> list[StorageDoc]:
        query: Document = {"tenant_id": tenant_id, **(where or {})}
        if after is not None:
            query["_id"] = {"$gt": after}
        cursor = self._storages.find(query).sort("_id", ASCENDING).limit(limit)
        return [doc async for doc in cursor]

    async def in_state(self, state: str) -> list[StorageDoc]:
        return [doc async for doc in self._storages.find({"state": state})]

    async def unfinished(self, older_than_s: float) -> list[StorageDoc]:
        """Storages a crash may have left half-created or half-deleted."""
        cutoff = now() - timedelta(seconds=older_than_s)
        query = {"state": {"$in": ["provisioning", "deleting"]}, "updated_at": {"$lt": cutoff}}
        return [doc async for doc in self._storages.find(query)]

    async def record_usage(self, key: str, used_bytes: int, at: datetime) -> None:
        await self._usage.update_one(
            {"_id": key}, {"$set": {"used_bytes": used_bytes, "at": at}}, upsert=True
        )

    async def usage(self, keys: list[str]) -> dict[str, int]:
        if not keys:
            return {}
        found = self._usage.find({"_id": {"$in": keys}})
        return {doc["_id"]: doc["used_bytes"] async for doc in found}


class AccessorStore:
    def __init__(self, db: Database) -> None:
        self._accessors: Collection[AccessorDoc] = typed(db, ACCESSORS, AccessorDoc)

    async def insert(self, doc: AccessorDoc) -> None:
        await self._accessors.insert_one(doc)

    async def get(self, accessor_id: str) -> AccessorDoc | None:
        return await self._accessors.find_one({"_id": accessor_id})

    async def of_storage(self, tenant_id: str, storage_id: str) -> list[AccessorDoc]:
        query = {"tenant_id": tenant_id, "storage_id": storage_id}
        return [doc async for doc in self._accessors.find(query).sort("created_at", ASCENDING)]

    async def remove(self, accessor_id: str) -> None:
        await self._accessors.delete_one({"_id": accessor_id})


class UploadStore:
    def __init__(self, db: Database) -> None:
        self._uploads: Collection[UploadDoc] = typed(db, UPLOADS, UploadDoc)

    async def insert(self, doc: UploadDoc) -> None:
        await self._uploads.insert_one(doc)

    async def get(self, upload_id: str) -> UploadDoc | None:
        return await self._uploads.find_one({"_id": upload_id})

    async def remove(self, upload_id: str) -> None:
        await self._uploads.delete_one({"_id": upload_id})


class AttachmentStore:
    """One document per instance: the storages it uses and what was made for it."""

    def __init__(self, db: Database) -> None:
        self._attachments: Collection[AttachmentDoc] = typed(db, ATTACHMENTS, AttachmentDoc)

    async def get(self, key: str) -> AttachmentDoc | None:
        return await self._attachments.find_one({"_id": key})

    async def insert(self, doc: AttachmentDoc) -> bool:
        try:
            await self._attachments.insert_one(doc)
        except DuplicateKeyError:
            return False
        return True

    async def remove(self, key: str) -> None:
        await self._attachments.delete_one({"_id": key})

    async def mark_complete(self, key: str) -> None:
        await self._attachments.update_one({"_id": key}, {"$set": {"complete": True}})

    async def of_tenant(self, tenant_id: str) -> list[AttachmentDoc]:
        return [doc async for doc in self._attachments.find({"tenant_id": tenant_id})]

    async def stays(self, keys: list[str]) -> dict[str, int]:
        """The attachments there are of these keys, with the stay each was made for."""
        if not keys:
            return {}
        found = self._attachments.find({"_id": {"$in": keys}}, {"_id": 1, "stay": 1})
        return {doc["_id"]: doc.get("stay", 0) async for doc in found}
