"""All MongoDB access of the instances service.

Two rules keep this correct on FerretDB as well as MongoDB:

- No transactions: an instance's transition, its history entry and its outbox
  events are one single-document update.
- One writer per document. FerretDB 1.24 applies an update as read, modify,
  write without locking, so two concurrent updates of one document can lose
  one (measured: 400 concurrent $inc gave 152). Inserts and unique indexes are
  safe. So after admission an instance document is written only by the
  controller's worker for that instance; the API records stop and delete
  requests as inserted documents, and wakes the controller with inserted
  wake-up documents. Stock operations are inserted too, keyed by operationID.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import secrets
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from pymongo import ASCENDING, IndexModel, ReturnDocument
from pymongo.errors import DuplicateKeyError

from gpucloud_libs.clock import aware, now
from gpucloud_libs.errors import DependencyUnavailable
from gpucloud_libs.mongo import Collection, Database, Document, IndexPlan, typed
from gpucloud_libs.outbox import OutboxEntry

from .documents import InstanceDoc, QuotaDoc, SpecDoc, StockUnitDoc, TenantDoc, TenantFields
from .lifecycle import TERMINAL, State, Step

SPECS = "specs"
TENANTS = "tenants"
INSTANCES = "instances"
TENANT_NAMESPACES = "tenant_namespaces"
REQUESTS = "instance_requests"
QUOTA_CLAIMS = "quota_claims"  # before per-tenant documents; read once per tenant, then emptied
QUOTA_USAGE = "quota_usage"
QUOTA_LOCKS = "quota_locks"
#: A quota lock older than this belongs to a holder that died; the next start takes it.
QUOTA_LOCK_TTL = timedelta(seconds=5)
#: How long a start waits for its tenant's quota lock before answering 503.
QUOTA_LOCK_WAIT_S = 10.0
IDEMPOTENCY = "idempotency_keys"
WAKEUPS = "wakeups"
STOCK_OPERATIONS = "stock_operations"
STOCKS = "stocks"

INDEXES: IndexPlan = {
    INSTANCES: [
        IndexModel(
            [("tenant_id", ASCENDING), ("instance_id", ASCENDING)],
            unique=True,
            name="tenant_instance",
        ),
        IndexModel([("state", ASCENDING)], name="state"),
        IndexModel([("has_outbox", ASCENDING)], name="has_outbox"),
        IndexModel([("admitted", ASCENDING)], name="admitted"),
        IndexModel([("tenant_id", ASCENDING), ("state", ASCENDING)], name="tenant_state"),
    ],
    STOCKS: [IndexModel([("spec_name", ASCENDING), ("state", ASCENDING)], name="spec_state")],
    QUOTA_CLAIMS: [IndexModel([("tenant_id", ASCENDING)], name="tenant")],
}


def instance_key(tenant_id: str, instance_id: str) -> str:
    return f"{tenant_id}/{instance_id}"


@dataclass(frozen=True)
class _QuotaChange:
    """A claim (with the quota it must fit) or, with no quota, a release."""

    instance_id: str
    gpus: int
    quota: QuotaDoc | None

    def apply(self, claims: dict[str, int]) -> bool:
        if self.quota is None:
            return claims.pop(self.instance_id, None) is not None
        if self.instance_id in claims:
            return True  # a retried claim that went through
        if (
            len(claims) + 1 > self.quota["max_instances"]
            or sum(claims.values()) + self.gpus > self.quota["max_gpus"]
        ):
            return False
        claims[self.instance_id] = self.gpus
        return True


class DuplicateInstance(Exception):
    """An instance with the same tenant and instanceID (or Idempotency-Key) exists."""


class SpecStore:
    def __init__(self, db: Database) -> None:
        self._specs: Collection[SpecDoc] = typed(db, SPECS, SpecDoc)

    async def insert(self, spec: SpecDoc) -> bool:
        try:
            await self._specs.insert_one(spec)
        except DuplicateKeyError:
            return False
        return True

    async def get(self, name: str) -> SpecDoc | None:
        return await self._specs.find_one({"_id": name})

    async def list(self) -> list[SpecDoc]:
        return [spec async for spec in self._specs.find({}).sort("_id", ASCENDING)]

    async def delete(self, name: str) -> bool:
        return (await self._specs.delete_one({"_id": name})).deleted_count == 1


class TenantStore:
    """`tenants` is written by the tenant-event handler; `tenant_namespaces` by the controller."""

    def __init__(self, db: Database) -> None:
        self._tenants: Collection[TenantDoc] = typed(db, TENANTS, TenantDoc)
        self._namespaces = db[TENANT_NAMESPACES]

    async def upsert(self, tenant_id: str, fields: TenantFields) -> None:
        await self._tenants.update_one({"_id": tenant_id}, {"$set": fields}, upsert=True)

    async def get(self, tenant_id: str) -> TenantDoc | None:
        return await self._tenants.find_one({"_id": tenant_id})

    async def all(self) -> list[TenantDoc]:
        return [tenant async for tenant in self._tenants.find({})]

    async def applied_version(self, tenant_id: str) -> str | None:
        doc = await self._namespaces.find_one({"_id": tenant_id})
        return None if doc is None else str(doc["version"])

    async def applied_versions(self) -> dict[str, str]:
        return {doc["_id"]: str(doc["version"]) async for doc in self._namespaces.find({})}

    async def mark_applied(self, tenant_id: str, version: str) -> None:
        await self._namespaces.update_one(
            {"_id": tenant_id}, {"$set": {"version": version}}, upsert=True
        )


class InstanceStore:
    def __init__(self, db: Database) -> None:
        self._instances: Collection[InstanceDoc] = typed(db, INSTANCES, InstanceDoc)
        self._claims = db[QUOTA_CLAIMS]
        self._usage = db[QUOTA_USAGE]
        self._locks = db[QUOTA_LOCKS]
        self._quota_pending: dict[str, list[tuple[_QuotaChange, asyncio.Future[bool]]]] = {}
        self._quota_draining: set[str] = set()
        self._quota_tasks: set[asyncio.Task[None]] = set()
        self._idempotency = db[IDEMPOTENCY]

    async def insert(self, document: InstanceDoc) -> None:
        try:
            await self._instances.insert_one(document)
        except DuplicateKeyError as error:
            raise DuplicateInstance(str(error)) from error

    async def get(self, key: str) -> InstanceDoc | None:
        return await self._instances.find_one({"_id": key})

    async def by_idempotency_key(self, tenant_id: str, idempotency_key: str) -> InstanceDoc | None:
        mapping = await self._idempotency.find_one({"_id": f"{tenant_id}|{idempotency_key}"})
        return None if mapping is None else await self.get(mapping["instance"])

    async def record_idempotency_key(self, tenant_id: str, idempotency_key: str, key: str) -> bool:
        """False when a concurrent request already took this key."""
        try:
            await self._idempotency.insert_one(
                {"_id": f"{tenant_id}|{idempotency_key}", "instance": key}
            )
        except DuplicateKeyError:
            return False
        return True

    async def forget_idempotency_key(self, tenant_id: str, idempotency_key: str) -> None:
        await self._idempotency.delete_one({"_id": f"{tenant_id}|{idempotency_key}"})

    async def remove(self, key: str) -> None:
        await self._instances.delete_one({"_id": key})

    # Quota: one document per tenant, {count, gpus, claims: {instance id: gpus}},
    # holding every admitted, not yet terminal instance. Every change to it is made
    # under the tenant's database lock (below): FerretDB applies an update as a
    # read, then a write, so two unlocked updates of one document can both pass a
    # filter or lose each other's counts. Concurrent claims and releases of a
    # tenant are applied in batches, one lock, one read and one write per batch
    # (a group commit), so admission stays exact and still takes dozens of starts
    # a second for one tenant.

    async def _seeded(self, tenant_id: str) -> Document:
        doc = await self._usage.find_one({"_id": tenant_id})
        if doc is not None:
            return doc
        # First use, or a data directory from before: seed from the old claim documents.
        claims = {
            claim["_id"].partition("/")[2]: int(claim["gpus"])
            async for claim in self._claims.find({"tenant_id": tenant_id})
        }
        seed: Document = {"_id": tenant_id, "count": len(claims), "gpus": sum(claims.values()),
                          "claims": claims}  # fmt: skip
        await self._usage.insert_one(seed)
        await self._claims.delete_many({"tenant_id": tenant_id})
        return seed

    async def usage(self, tenant_id: str) -> tuple[int, int]:
        """(instances, GPUs) the tenant holds or is being admitted for."""
        doc = await self._usage.find_one({"_id": tenant_id})
        if doc is None:
            claims = [c async for c in self._claims.find({"tenant_id": tenant_id}, {"gpus": 1})]
            return len(claims), sum(int(c["gpus"]) for c in claims)
        return int(doc["count"]), int(doc["gpus"])

    async def claim_quota(self, key: str, gpus: int, quota: QuotaDoc) -> bool:
        """Claim `gpus` and one instance for `key` if they fit the quota; False if not."""
        tenant_id, _, instance_id = key.partition("/")
        return await self._quota_change(tenant_id, _QuotaChange(instance_id, gpus, quota))

    async def release_quota(self, key: str) -> None:
        tenant_id, _, instance_id = key.partition("/")
        await self._claims.delete_one({"_id": key})  # an old-style claim, if any
        doc = await self._usage.find_one({"_id": tenant_id}, {f"claims.{instance_id}": 1})
        if instance_id in ((doc or {}).get("claims") or {}):
            await self._quota_change(tenant_id, _QuotaChange(instance_id, 0, None))

    async def _quota_change(self, tenant_id: str, change: _QuotaChange) -> bool:
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._quota_pending.setdefault(tenant_id, []).append((change, done))
        if tenant_id not in self._quota_draining:
            self._quota_draining.add(tenant_id)
            task = asyncio.create_task(self._drain_quota(tenant_id))
            self._quota_tasks.add(task)
            task.add_done_callback(self._quota_tasks.discard)
        return await done

    async def _drain_quota(self, tenant_id: str) -> None:
        """Apply the tenant's waiting changes, in arrival order, a batch at a time."""
        try:
            while batch := self._quota_pending.pop(tenant_id, []):
                try:
                    async with self._database_lock(tenant_id):
                        doc = await self._seeded(tenant_id)
                        claims: dict[str, int] = dict(doc.get("claims") or {})
                        results = [change.apply(claims) for change, _ in batch]
                        await self._usage.update_one(
                            {"_id": tenant_id},
                            {"$set": {"claims": claims, "count": len(claims),
                                      "gpus": sum(claims.values())}},
                        )  # fmt: skip
                except Exception as error:  # every waiter of the batch gets it
                    for _, done in batch:
                        done.set_exception(error)
                    continue
                for (_, done), result in zip(batch, results, strict=True):
                    done.set_result(result)
        finally:
            # No await since the last empty pop: nothing can have been queued unseen.
            self._quota_draining.discard(tenant_id)

    @contextlib.asynccontextmanager
    async def _database_lock(self, tenant_id: str) -> AsyncIterator[None]:
        """A per-tenant mutex across replicas, from the one write every MongoDB-wire
        store makes atomic: inserting a unique `_id`. A holder that died is taken
        over once its lock is QUOTA_LOCK_TTL old (a holder keeps it milliseconds)."""
        lock_id, token = f"lock:{tenant_id}", secrets.token_hex(8)
        deadline = time.monotonic() + QUOTA_LOCK_WAIT_S
        while True:
            try:
                await self._locks.insert_one({"_id": lock_id, "token": token, "at": now()})
                break
            except DuplicateKeyError:
                held = await self._locks.find_one({"_id": lock_id})
                if held is not None and aware(held["at"]) < now() - QUOTA_LOCK_TTL:
                    await self._locks.delete_one({"_id": lock_id, "token": held["token"]})
                if time.monotonic() > deadline:
                    raise DependencyUnavailable(
                        "the tenant's quota is busy with other starts; retry", retry_after_s=1
                    ) from None
                await asyncio.sleep(random.uniform(0.002, 0.01))
        try:
            yield
        finally:
            await self._locks.delete_one({"_id": lock_id, "token": token})

    async def claim_keys(self) -> list[str]:
        keys = [claim["_id"] async for claim in self._claims.find({}, {"_id": 1})]
        async for doc in self._usage.find({}, {"claims": 1}):
            keys += [
                instance_key(doc["_id"], instance_id) for instance_id in doc.get("claims") or {}
            ]
        return keys

    async def page(
        self,
        tenant_id: str | None,
        *,
        states: list[str] | None,
        spec_name: str | None,
        after: str | None,
        limit: int,
    ) -> list[InstanceDoc]:
        query: Document = {}
        if tenant_id is not None:
            query["tenant_id"] = tenant_id
        if states:
            # A single state as an equality, which FerretDB hands to PostgreSQL.
            query["state"] = states[0] if len(states) == 1 else {"$in": states}
        else:
            query["state"] = {"$ne": State.DELETED.value}
        if spec_name:
            query["spec_name"] = spec_name
        if after:
            query["_id"] = {"$gt": after}
        cursor = self._instances.find(query, {"outbox": 0}).sort("_id", ASCENDING).limit(limit)
        return [doc async for doc in cursor]

    async def transition(
        self,
        doc: InstanceDoc,
        steps: Iterable[Step],
        *,
        events: list[OutboxEntry],
        extra: Document | None = None,
    ) -> InstanceDoc | None:
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

    async def admit(self, doc: InstanceDoc, step: Step, event: OutboxEntry) -> InstanceDoc | None:
        """The API's one write after its insert, before the controller may act on it."""
        return await self.transition(doc, [step], events=[event], extra={"admitted": True})

    async def update_fields(self, key: str, fields: Document) -> None:
        await self._instances.update_one({"_id": key}, {"$set": {**fields, "updated_at": now()}})

    async def live_states(self) -> dict[str, State]:
        """Every instance that is not terminal, with its state.

        One equality query per state: FerretDB hands an equality filter
        down to PostgreSQL, but applies $in itself after decoding every document.
        """
        live: dict[str, State] = {}
        for state in State:
            if state not in TERMINAL:
                async for doc in self._instances.find({"state": state.value}, {"_id": 1}):
                    live[doc["_id"]] = state
        return live

    async def stale_unadmitted(self, older_than: datetime) -> list[str]:
        cursor = self._instances.find({"admitted": False}, {"_id": 1, "created_at": 1})
        return [
            doc["_id"] async for doc in cursor if doc["created_at"].replace(tzinfo=UTC) < older_than
        ]

    async def keys_with_outbox(self) -> list[str]:
        """Instances with recorded but unpublished transitions (read once per leadership)."""
        return [doc["_id"] async for doc in self._instances.find({"has_outbox": True}, {"_id": 1})]

    async def clear_outbox(self, key: str, sequence: int) -> None:
        """Drop the published events, unless a transition was recorded meanwhile.

        The caller is the document's only writer, so the sequence guard holds; if it
        did move, the newer events stay and the next flush sends the lot again
        (same event ids, deduplicated downstream).
        """
        await self._instances.update_one(
            {"_id": key, "sequence": sequence}, {"$set": {"outbox": [], "has_outbox": False}}
        )


class RequestStore:
    """What the API asks of the controller, as inserted documents only."""

    def __init__(self, db: Database) -> None:
        self._requests = db[REQUESTS]
        self._wakeups = db[WAKEUPS]

    async def request(self, key: str, kind: str) -> None:
        """Record a `stop` or `delete` request once; repeating it changes nothing."""
        with contextlib.suppress(DuplicateKeyError):
            await self._requests.insert_one(
                {"_id": f"{key}|{kind}", "key": key, "kind": kind, "at": now()}
            )
        await self.wake(key)

    async def kinds(self, key: str) -> set[str]:
        """The requests recorded for an instance, by `_id` (constant time on FerretDB)."""
        kinds = set()
        for kind in ("stop", "delete"):
            if await self._requests.find_one({"_id": f"{key}|{kind}"}, {"_id": 1}):
                kinds.add(kind)
        return kinds

    async def wake(self, key: str) -> None:
        await self._wakeups.insert_one({"key": key, "at": now()})

    async def take_wakeups(self, limit: int = 500) -> list[str]:
        docs = [doc async for doc in self._wakeups.find({}).limit(limit)]
        if docs:
            await self._wakeups.delete_many({"_id": {"$in": [doc["_id"] for doc in docs]}})
        return [doc["key"] for doc in docs]


class StockStore:
    """Warm pools: operations (inserted by the API, keyed by operationID) add up to a
    target per spec; one document per placeholder pod, written by the controller only."""

    def __init__(self, db: Database) -> None:
        self._operations = db[STOCK_OPERATIONS]
        self._stocks: Collection[StockUnitDoc] = typed(db, STOCKS, StockUnitDoc)

    async def record_operation(self, spec_name: str, delta: int, operation_id: str) -> bool:
        """False when this operationID was applied before (seed 004's idempotency key)."""
        try:
            await self._operations.insert_one(
                {"_id": operation_id, "spec_name": spec_name, "delta": delta, "at": now()}
            )
        except DuplicateKeyError:
            return False
        return True

    async def targets(self) -> dict[str, int]:
        """Per spec: the operations' sum, never below zero."""
        totals: dict[str, int] = {}
        async for doc in self._operations.find({}, {"spec_name": 1, "delta": 1}):
            totals[doc["spec_name"]] = totals.get(doc["spec_name"], 0) + int(doc["delta"])
        return {spec: max(total, 0) for spec, total in totals.items()}

    async def units(self, spec_name: str | None = None) -> list[StockUnitDoc]:
        query = {} if spec_name is None else {"spec_name": spec_name}
        return [doc async for doc in self._stocks.find(query)]

    async def add_unit(self, name: str, spec_name: str) -> None:
        await self._stocks.insert_one(
            {
                "_id": name,
                "spec_name": spec_name,
                "state": "placing",
                "node": None,
                "zone": None,
                "created_at": now(),
            }
        )

    async def mark_available(self, name: str, node: str, zone: str | None) -> None:
        await self._stocks.update_one(
            {"_id": name}, {"$set": {"state": "available", "node": node, "zone": zone}}
        )

    async def remove_unit(self, name: str) -> None:
        await self._stocks.delete_one({"_id": name})
