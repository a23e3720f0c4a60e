"""The inference services' collections: services, their configurations (revisions), load reports and ended services' replica runs."""

from __future__ import annotations

from datetime import UTC, datetime

from pymongo import ASCENDING, ReturnDocument
from pymongo.errors import DuplicateKeyError

from gpucloud_libs.clock import now
from gpucloud_libs.mongo import Collection, Database, Document, typed
from gpucloud_libs.outbox import OutboxEntry

from ..documents import (
    EndedServiceDoc,
    ServiceConfigDoc,
    ServiceDoc,
    project_match,
    workload_project,
)
from ..store import (
    ENDED_SERVICES,
    SERVICE_CONFIGS,
    SERVICE_LOAD,
    SERVICES,
    TENANTS,
    DuplicateInstance,
    walk_tenants,
)


class DuplicateGeneration(Exception):
    """Another change of the same inference service made this generation first."""


class ServiceStore:
    """Inference services. The service document is inserted by the API and then
    written by the controller's worker alone; each change of the desired state is
    an inserted configuration (ServiceConfigDoc), the newest generation winning."""

    def __init__(self, db: Database) -> None:
        self._services: Collection[ServiceDoc] = typed(db, SERVICES, ServiceDoc)
        self._configs: Collection[ServiceConfigDoc] = typed(db, SERVICE_CONFIGS, ServiceConfigDoc)
        self._load = db[SERVICE_LOAD]
        self._ended: Collection[EndedServiceDoc] = typed(db, ENDED_SERVICES, EndedServiceDoc)
        self._tenants = db[TENANTS]

    async def insert(self, service: ServiceDoc, config: ServiceConfigDoc) -> None:
        """The service, then its first configuration. A crash in between leaves a
        service without one, which the controller removes (`remove`)."""
        try:
            await self._services.insert_one(service)
        except DuplicateKeyError as error:
            raise DuplicateInstance(str(error)) from error
        await self.add_config(config)

    async def add_config(self, config: ServiceConfigDoc) -> None:
        try:
            await self._configs.insert_one(config)
        except DuplicateKeyError as error:
            raise DuplicateGeneration(config["_id"]) from error

    async def get(self, key: str) -> ServiceDoc | None:
        return await self._services.find_one({"_id": key})

    async def configs(self, key: str) -> list[ServiceConfigDoc]:
        """Every generation of the service, oldest first."""
        return (await self.configs_of([key]))[key]

    async def configs_of(self, keys: list[str]) -> dict[str, list[ServiceConfigDoc]]:
        """Every generation of each service, oldest first, in one query (a page of the
        list reads them all at once, not one query per service)."""
        found: dict[str, list[ServiceConfigDoc]] = {key: [] for key in keys}
        async for doc in self._configs.find({"key": {"$in": keys}}):
            found[doc["key"]].append(doc)
        return {key: sorted(docs, key=lambda d: d["generation"]) for key, docs in found.items()}

    async def page(
        self, tenant_id: str | None, *, after: str | None, limit: int,
        projects: tuple[str, ...] | None = None,
    ) -> list[ServiceDoc]:  # fmt: skip
        """As JobStore.page: a tenant's services (of these `projects`', if named) in `_id`
        order, or every tenant's."""
        if tenant_id is None:
            tenants = [doc["_id"] async for doc in self._tenants.find({}, {"_id": 1})]

            async def one_tenant(tenant: str, after: str | None, wanted: int) -> list[ServiceDoc]:
                return await self.page(tenant, after=after, limit=wanted, projects=projects)

            return await walk_tenants(tenants, after, limit, one_tenant)
        query: Document = {"tenant_id": tenant_id}
        if projects is not None:
            query |= project_match(projects)
        if after:
            query["_id"] = {"$gt": after}
        cursor = self._services.find(query, {"outbox": 0}).sort("_id", ASCENDING).limit(limit)
        return [doc async for doc in cursor]

    async def keys(self, tenant_id: str | None = None) -> list[str]:
        query: Document = {} if tenant_id is None else {"tenant_id": tenant_id}
        return [doc["_id"] async for doc in self._services.find(query, {"_id": 1})]

    async def clusters(self) -> list[str | None]:
        """The cluster of every service (None: the home cluster)."""
        return [doc.get("cluster") async for doc in self._services.find({}, {"cluster": 1})]

    async def save(
        self, doc: ServiceDoc, changes: Document, events: list[OutboxEntry]
    ) -> ServiceDoc | None:
        """Apply the controller's changes if the document is still the one it read;
        returns the new document, or None when it moved meanwhile."""
        update: Document = {
            "$set": {**changes, "updated_at": now(), **({"has_outbox": True} if events else {})},
            "$inc": {"version": 1},
        }
        if events:
            update["$push"] = {"outbox": {"$each": events}}
        return await self._services.find_one_and_update(
            {"_id": doc["_id"], "version": doc["version"]},
            update,
            return_document=ReturnDocument.AFTER,
        )

    async def clear_outbox(self, key: str, version: int) -> None:
        """Drop the published events, unless the document changed meanwhile."""
        await self._services.update_one(
            {"_id": key, "version": version}, {"$set": {"outbox": [], "has_outbox": False}}
        )

    async def keys_with_outbox(self) -> list[str]:
        return [doc["_id"] async for doc in self._services.find({"has_outbox": True}, {"_id": 1})]

    async def keep_runs(self, doc: ServiceDoc, deleted_at: datetime) -> None:
        """Keep a deleted service's replica runs, by its incarnation (a repeat writes the
        same); its name may be used again, and each use's runs stay apart."""
        ended: EndedServiceDoc = {
            "_id": f"{doc['_id']}@{doc['incarnation']}", "key": doc["_id"],
            "tenant_id": doc["tenant_id"], "service_id": doc["service_id"],
            "incarnation": doc["incarnation"], "spec_name": doc["spec_name"],
            "gpu_count": doc["gpu_count"], "created_at": doc["created_at"],
            "deleted_at": deleted_at, "runs": doc["runs"], "project": workload_project(doc),
        }  # fmt: skip
        await self._ended.replace_one({"_id": ended["_id"]}, ended, upsert=True)

    async def ended_runs(self, key: str) -> list[EndedServiceDoc]:
        """The kept runs of each deleted use of this service name, oldest first."""
        return await self._ended.find({"key": key}).sort("deleted_at", ASCENDING).to_list()

    async def remove(self, key: str) -> None:
        """The configurations first: a service document left behind is found again."""
        await self._configs.delete_many({"key": key})
        await self._load.delete_many({"key": key})
        await self._services.delete_one({"_id": key})

    async def record_load(self, gateway: str, key: str, in_flight: float) -> bool:
        """One gateway replica's latest load of a service (one document per gateway
        replica and service, so each has one writer); False if there is no such service."""
        if await self._services.find_one({"_id": key}, {"_id": 1}) is None:
            return False
        await self._load.replace_one(
            {"_id": f"{gateway}|{key}"},
            {"key": key, "in_flight": in_flight, "at": now()},
            upsert=True,
        )
        return True

    async def load(self, key: str, since: datetime) -> float:
        """The requests in flight to a service, summed over the gateway replicas that
        reported since `since`."""
        loads: list[float] = [
            float(doc["in_flight"])
            async for doc in self._load.find({"key": key})
            if doc["at"].replace(tzinfo=UTC) >= since
        ]
        return sum(loads)
