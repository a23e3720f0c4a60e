"""All MongoDB access of the instances service.

FerretDB (the local stack's database) has no transactions, so every state
change is one single-document update: an instance's transition, its history
entry and its outbox events are written together, guarded by the instance's
`sequence` (optimistic concurrency).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from pymongo import ASCENDING, IndexModel, ReturnDocument
from pymongo.errors import DuplicateKeyError

from gpucloud_libs.mongo import Database, Document, IndexPlan

from .lifecycle import ACTIVE, TERMINAL, State, Step

SPECS = "specs"
TENANTS = "tenants"
INSTANCES = "instances"
STOCK_TARGETS = "stock_targets"
STOCKS = "stocks"

INDEXES: IndexPlan = {
    INSTANCES: [
        IndexModel(
            [("tenant_id", ASCENDING), ("instance_id", ASCENDING)],
            unique=True,
            name="tenant_instance",
        ),
        IndexModel(
            [("tenant_id", ASCENDING), ("idempotency_key", ASCENDING)],
            unique=True,
            name="tenant_idempotency",
        ),
        IndexModel([("state", ASCENDING)], name="state"),
        IndexModel([("dirty", ASCENDING)], name="dirty"),
        IndexModel([("has_outbox", ASCENDING)], name="has_outbox"),
        IndexModel([("tenant_id", ASCENDING), ("state", ASCENDING)], name="tenant_state"),
    ],
    STOCKS: [IndexModel([("spec_name", ASCENDING), ("state", ASCENDING)], name="spec_state")],
}


def now() -> datetime:
    return datetime.now(UTC)


def instance_key(tenant_id: str, instance_id: str) -> str:
    return f"{tenant_id}/{instance_id}"


class DuplicateInstance(Exception):
    """An instance with the same tenant and instanceID (or Idempotency-Key) exists."""


class SpecStore:
    def __init__(self, db: Database) -> None:
        self._specs = db[SPECS]

    async def insert(self, spec: Document) -> bool:
        try:
            await self._specs.insert_one({"_id": spec["name"], **spec})
        except DuplicateKeyError:
            return False
        return True

    async def get(self, name: str) -> Document | None:
        return await self._specs.find_one({"_id": name})

    async def list(self) -> list[Document]:
        return [spec async for spec in self._specs.find({}).sort("_id", ASCENDING)]

    async def delete(self, name: str) -> bool:
        return (await self._specs.delete_one({"_id": name})).deleted_count == 1


class TenantStore:
    def __init__(self, db: Database) -> None:
        self._tenants = db[TENANTS]

    async def upsert(self, tenant_id: str, fields: Document) -> None:
        await self._tenants.update_one({"_id": tenant_id}, {"$set": fields}, upsert=True)

    async def get(self, tenant_id: str) -> Document | None:
        return await self._tenants.find_one({"_id": tenant_id})

    async def mark_namespace_ready(self, tenant_id: str, quota_version: str) -> None:
        await self._tenants.update_one(
            {"_id": tenant_id}, {"$set": {"namespace_ready": True, "applied_quota": quota_version}}
        )

    async def needing_namespace(self) -> list[Document]:
        return [t async for t in self._tenants.find({"namespace_ready": False})]


class InstanceStore:
    def __init__(self, db: Database) -> None:
        self._instances = db[INSTANCES]

    async def insert(self, document: Document) -> None:
        try:
            await self._instances.insert_one(document)
        except DuplicateKeyError as error:
            raise DuplicateInstance(str(error)) from error

    async def get(self, key: str) -> Document | None:
        return await self._instances.find_one({"_id": key})

    async def find_for_tenant(
        self, tenant_id: str, *, instance_id: str | None = None, idempotency_key: str | None = None
    ) -> Document | None:
        query: Document = {"tenant_id": tenant_id}
        if instance_id is not None:
            query["instance_id"] = instance_id
        if idempotency_key is not None:
            query["idempotency_key"] = idempotency_key
        return await self._instances.find_one(query)

    async def admit(self, key: str, event: Document) -> None:
        await self._instances.update_one(
            {"_id": key},
            {
                "$set": {"admitted": True, "dirty": True, "has_outbox": True},
                "$push": {"outbox": event},
            },
        )

    async def remove(self, key: str) -> None:
        await self._instances.delete_one({"_id": key})

    async def active_usage(self, tenant_id: str) -> tuple[int, int]:
        """(instances, GPUs) the tenant holds or is being admitted for."""
        count, gpus = 0, 0
        async for doc in self._instances.find(
            {"tenant_id": tenant_id, "state": {"$in": [s.value for s in ACTIVE]}},
            {"gpu_count": 1},
        ):
            count += 1
            gpus += int(doc["gpu_count"])
        return count, gpus

    async def page(
        self,
        tenant_id: str | None,
        *,
        states: list[str] | None,
        spec_name: str | None,
        after: str | None,
        limit: int,
    ) -> list[Document]:
        query: Document = {}
        if tenant_id is not None:
            query["tenant_id"] = tenant_id
        query["state"] = {"$in": states} if states else {"$ne": State.DELETED.value}
        if spec_name:
            query["spec_name"] = spec_name
        if after:
            query["_id"] = {"$gt": after}
        cursor = self._instances.find(query, {"outbox": 0}).sort("_id", ASCENDING).limit(limit)
        return [doc async for doc in cursor]

    async def transition(
        self,
        doc: Document,
        steps: Iterable[Step],
        *,
        events: list[Document],
        extra: Document | None = None,
    ) -> Document | None:
        """Apply transitions if nobody else did first; returns the new document or None."""
        steps = list(steps)
        if not steps:
            return doc
        last = steps[-1]
        changes: Document = {
            "state": last.state.value,
            "reason": last.reason,
            "updated_at": now(),
            "has_outbox": True,
            **(extra or {}),
        }
        if last.state in TERMINAL:
            changes["dirty"] = False
        history = [{"state": s.state.value, "at": s.at, "reason": s.reason} for s in steps]
        return await self._instances.find_one_and_update(
            {"_id": doc["_id"], "sequence": doc["sequence"]},
            {
                "$set": changes,
                "$inc": {"sequence": len(steps)},
                "$push": {"history": {"$each": history}, "outbox": {"$each": events}},
            },
            return_document=ReturnDocument.AFTER,
        )

    async def update_fields(self, key: str, fields: Document) -> None:
        await self._instances.update_one({"_id": key}, {"$set": {**fields, "updated_at": now()}})

    async def request_stop(self, key: str) -> Document | None:
        return await self._instances.find_one_and_update(
            {"_id": key},
            {"$set": {"desired": "stopped", "dirty": True, "updated_at": now()}},
            return_document=ReturnDocument.AFTER,
        )

    async def mark_dirty(self, key: str) -> None:
        await self._instances.update_one({"_id": key}, {"$set": {"dirty": True}})

    async def clear_dirty(self, key: str, sequence: int) -> None:
        await self._instances.update_one(
            {"_id": key, "sequence": sequence}, {"$set": {"dirty": False}}
        )

    async def dirty_keys(self, limit: int = 500) -> list[str]:
        return [
            doc["_id"]
            async for doc in self._instances.find({"dirty": True}, {"_id": 1}).limit(limit)
        ]

    async def non_terminal_keys(self) -> list[str]:
        states = [s.value for s in State if s not in TERMINAL]
        return [
            doc["_id"] async for doc in self._instances.find({"state": {"$in": states}}, {"_id": 1})
        ]

    async def stale_unadmitted(self, older_than: datetime) -> list[str]:
        cursor = self._instances.find(
            {"admitted": False, "created_at": {"$lt": older_than}}, {"_id": 1}
        )
        return [doc["_id"] async for doc in cursor]

    async def with_outbox(self, limit: int = 200) -> list[Document]:
        cursor = self._instances.find({"has_outbox": True}, {"outbox": 1}).limit(limit)
        return [doc async for doc in cursor]

    async def drop_published(self, key: str, event_id: str) -> None:
        """Remove the outbox's first event once it is published, only if it is still first.

        (By position rather than `$pull` with a condition, which FerretDB ignores.)
        """
        await self._instances.update_one(
            {"_id": key, "outbox.0.id": event_id}, {"$pop": {"outbox": -1}}
        )
        await self._instances.update_one(
            {"_id": key, "outbox": []}, {"$set": {"has_outbox": False}}
        )

    async def known_keys(self, keys: Iterable[str]) -> set[str]:
        wanted = list(keys)
        if not wanted:
            return set()
        states = [s.value for s in State if s not in TERMINAL]
        cursor = self._instances.find(
            {"_id": {"$in": wanted}, "state": {"$in": states}}, {"_id": 1}
        )
        return {doc["_id"] async for doc in cursor}


class StockStore:
    """Warm pools: a target count per spec, and one document per placeholder pod."""

    def __init__(self, db: Database) -> None:
        self._targets = db[STOCK_TARGETS]
        self._stocks = db[STOCKS]

    async def change_target(self, spec_name: str, delta: int, operation_id: str) -> Document:
        """Apply a stock operation once: a replayed operationID changes nothing."""
        await self._targets.update_one(
            {"_id": spec_name}, {"$setOnInsert": {"target": 0, "operations": []}}, upsert=True
        )
        applied = await self._targets.find_one_and_update(
            {"_id": spec_name, "operations": {"$ne": operation_id}},
            {"$inc": {"target": delta}, "$push": {"operations": operation_id}},
            return_document=ReturnDocument.AFTER,
        )
        if applied is None:
            current = await self._targets.find_one({"_id": spec_name})
            assert current is not None
            return current
        if applied["target"] < 0:
            await self._targets.update_one(
                {"_id": spec_name, "target": {"$lt": 0}}, {"$set": {"target": 0}}
            )
            applied["target"] = 0
        return applied

    async def targets(self) -> list[Document]:
        return [doc async for doc in self._targets.find({})]

    async def units(self, spec_name: str | None = None) -> list[Document]:
        query = {} if spec_name is None else {"spec_name": spec_name}
        return [doc async for doc in self._stocks.find(query)]

    async def add_unit(self, name: str, spec_name: str) -> None:
        await self._stocks.insert_one(
            {
                "_id": name,
                "spec_name": spec_name,
                "state": "placing",
                "node": None,
                "created_at": now(),
            }
        )

    async def mark_available(self, name: str, node: str) -> None:
        await self._stocks.update_one(
            {"_id": name, "state": "placing"}, {"$set": {"state": "available", "node": node}}
        )

    async def claim(
        self, spec_name: str, instance_key_: str, zones: list[str] | None = None
    ) -> Document | None:
        """Atomically take one available unit of `spec_name` for an instance."""
        query: Document = {"spec_name": spec_name, "state": "available"}
        if zones:
            query["zone"] = {"$in": zones}
        return await self._stocks.find_one_and_update(
            query,
            {"$set": {"state": "claimed", "instance": instance_key_, "claimed_at": now()}},
            return_document=ReturnDocument.AFTER,
        )

    async def set_zone(self, name: str, zone: str | None) -> None:
        await self._stocks.update_one({"_id": name}, {"$set": {"zone": zone}})

    async def remove_unit(self, name: str) -> None:
        await self._stocks.delete_one({"_id": name})


def event_document(event_id: str, kafka_value: dict[str, Any]) -> Document:
    return {"id": event_id, "data": kafka_value}
