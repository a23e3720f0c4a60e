"""The clusters' collection, kubeconfigs sealed."""

from __future__ import annotations

from pymongo import ASCENDING, ReturnDocument
from pymongo.errors import DuplicateKeyError

from gpucloud_libs.mongo import Collection, Database, typed

from ..store import CLUSTERS, DuplicateInstance
from .documents import ClusterDoc, ClusterStatusDoc


class ClusterStore:
    def __init__(self, db: Database) -> None:
        self._clusters: Collection[ClusterDoc] = typed(db, CLUSTERS, ClusterDoc)

    async def insert(self, doc: ClusterDoc) -> None:
        try:
            await self._clusters.insert_one(doc)
        except DuplicateKeyError as error:
            raise DuplicateInstance(str(error)) from error

    async def get(self, name: str) -> ClusterDoc | None:
        return await self._clusters.find_one({"_id": name})

    async def list(self) -> list[ClusterDoc]:
        return [doc async for doc in self._clusters.find({}).sort("_id", ASCENDING)]

    async def set_state(self, name: str, state: str) -> ClusterDoc | None:
        """The cluster as set, or None when there is none of that name."""
        return await self._clusters.find_one_and_update(
            {"_id": name}, {"$set": {"state": state}}, return_document=ReturnDocument.AFTER
        )

    async def set_status(self, name: str, status: ClusterStatusDoc) -> None:
        await self._clusters.update_one({"_id": name}, {"$set": {"status": status}})

    async def set_home(self, doc: ClusterDoc) -> None:
        """Record the home cluster as the settings name it, keeping its state and
        status where it is recorded already; one the settings named before goes (it
        holds no kubeconfig to reach it by)."""
        await self._clusters.delete_many({"home": True, "_id": {"$ne": doc["_id"]}})
        try:
            await self.insert(doc)
        except DuplicateInstance:
            fields = {"region": doc["region"], "zones": doc["zones"], "home": True}
            await self._clusters.update_one({"_id": doc["_id"]}, {"$set": fields})

    async def remove(self, name: str) -> bool:
        return (await self._clusters.delete_one({"_id": name})).deleted_count == 1
