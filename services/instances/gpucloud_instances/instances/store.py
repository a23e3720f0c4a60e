"""The instances' collection: admitted instances, their transitions and outboxes, each write handed to the workload cache."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Iterator
from datetime import UTC, datetime

from pymongo import ASCENDING, ReturnDocument
from pymongo.errors import DuplicateKeyError, PyMongoError

from gpucloud_libs.clock import as_stored_values, now
from gpucloud_libs.identity import Identity
from gpucloud_libs.mongo import Collection, Database, Document, typed
from gpucloud_libs.outbox import OutboxEntry
from gpucloud_libs.project_shares import unseen_work

from ..documents import InstanceDoc, in_project_view, project_match
from ..lifecycle import TERMINAL, State, Step
from ..store import (
    IDEMPOTENCY,
    INSTANCES,
    TENANTS,
    DuplicateInstance,
    instance_key,
    walk_tenants,
)
from ..workloads.cache import WorkloadCache

#: What the admission queue reads of a queued instance.
_QUEUED_INSTANCE_FIELDS = {
    "_id": 1, "tenant_id": 1, "gpu_type": 1, "gpu_count": 1, "gpu_resource": 1, "gpu_weight": 1,
    "priority": 1, "created_at": 1, "queue_reason": 1, "user_id": 1, "project": 1,
}  # fmt: skip


log = logging.getLogger(__name__)

#: How long a failed fill of the cache waits before it reads again.
CACHE_FILL_RETRY_S = 2.0

#: Reads an instance's live stop request.
StopRequestReader = Callable[[str], Awaitable[Document | None]]


class InstanceStore:
    """Instance documents. Every write is handed to the workload cache
    (workloads/cache.py); the controller's reads, and once it is filled where one
    replica runs the API's pages and reads, come from it."""

    def __init__(self, db: Database, *, complete_cache: bool = False) -> None:
        self._instances: Collection[InstanceDoc] = typed(db, INSTANCES, InstanceDoc)
        self._tenants = db[TENANTS]
        self._idempotency = db[IDEMPOTENCY]
        self.cache = WorkloadCache(complete=complete_cache)

    async def fill_cache(self) -> None:
        """Fill the cache from the store, once, retrying until the store answers (pages
        come from the store meanwhile); only where this process writes every instance."""
        if not self.cache.complete:
            return

        async def every_instance() -> list[InstanceDoc]:
            query = {"state": {"$ne": State.DELETED.value}}
            return [doc async for doc in self._instances.find(query, {"outbox": 0})]

        while True:
            try:
                await self.cache.fill(every_instance)
                return
            except PyMongoError as error:
                log.warning(
                    "filling the instance cache failed; retrying", extra={"error": str(error)}
                )
                await asyncio.sleep(CACHE_FILL_RETRY_S)

    @contextlib.contextmanager
    def _writing(self, key: str) -> Iterator[None]:
        """A write that fails may have landed: the cache reads it again."""
        try:
            yield
        except BaseException:
            self.cache.forget(key)
            raise

    async def insert(self, document: InstanceDoc) -> None:
        try:
            with self._writing(document["_id"]):
                await self._instances.insert_one(document)
        except DuplicateKeyError as error:
            raise DuplicateInstance(str(error)) from error
        self.cache.written(as_stored_values(document))

    async def get(self, key: str) -> InstanceDoc | None:
        return await self._instances.find_one({"_id": key})

    async def current(self, key: str) -> InstanceDoc | None:
        """`get`, from the cache where it serves the API and holds the instance."""
        if self.cache.serves():
            await self._refresh_unsure()
            doc = self.cache.get(key)
            if doc is not None:
                return doc
        return await self.get(key)

    async def for_controller(
        self, key: str, stop_request: StopRequestReader
    ) -> tuple[InstanceDoc | None, Document | None]:
        """The instance and its live stop request, as the leader's controller may trust
        them: from the cache, or read (both at once) and kept there."""
        held = self.cache.controller_view(key)
        if held is not None:
            return held
        with self.cache.reading(key) as keep:
            doc, stop = await asyncio.gather(self.get(key), stop_request(key))
            keep(doc, stop)
        return doc, stop

    async def owned(self, identity: Identity, instance_id: str) -> InstanceDoc:
        """The caller's tenant's admitted instance (`current`), of a project the caller
        sees (decision 142), or a 404: another tenant's instance, another project's and
        a missing one look the same."""
        doc = await self.current(instance_key(identity.require_tenant(), instance_id))
        if doc is None or not doc.get("admitted") or not in_project_view(doc, identity):
            raise unseen_work("instance", instance_id, identity.projects)
        return doc

    async def _refresh_unsure(self) -> None:
        keys = self.cache.take_unsure()
        if keys:
            docs = await asyncio.gather(*(self.get(key) for key in keys))
            for key, doc in zip(keys, docs, strict=True):
                self.cache.refreshed(key, doc)

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
        with self._writing(key):
            await self._instances.delete_one({"_id": key})
        self.cache.removed(key)

    async def page(
        self,
        tenant_id: str | None,
        *,
        states: list[str] | None,
        spec_name: str | None,
        after: str | None,
        limit: int,
        projects: tuple[str, ...] | None = None,
    ) -> list[InstanceDoc]:
        """Up to `limit` of a tenant's instances (of these `projects`', if named) after
        the `_id` `after`, in `_id` order; with `tenant_id` None, every tenant's (see
        `_every_tenant_page`)."""
        if tenant_id is None:
            return await self._every_tenant_page(
                states=states,
                spec_name=spec_name,
                after=after,
                limit=limit,
                projects=projects,
            )
        if self.cache.serves(states):
            await self._refresh_unsure()
            return self.cache.page(
                tenant_id, states=states, spec_name=spec_name, after=after, limit=limit,
                projects=projects,
            )  # fmt: skip
        query: Document = {"tenant_id": tenant_id}
        if projects is not None:
            query |= project_match(projects)
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

    async def _every_tenant_page(
        self, *, states: list[str] | None, spec_name: str | None, after: str | None, limit: int,
        projects: tuple[str, ...] | None,
    ) -> list[InstanceDoc]:  # fmt: skip
        async def one_tenant(tenant: str, after: str | None, wanted: int) -> list[InstanceDoc]:
            return await self.page(
                tenant, states=states, spec_name=spec_name, after=after, limit=wanted,
                projects=projects,
            )  # fmt: skip

        if self.cache.serves(states):
            tenants = self.cache.tenants()  # those holding any instance not deleted
        else:
            tenants = [doc["_id"] async for doc in self._tenants.find({}, {"_id": 1})]
        return await walk_tenants(tenants, after, limit, one_tenant)

    async def transition(
        self,
        doc: InstanceDoc,
        steps: Iterable[Step],
        *,
        events: list[OutboxEntry],
        extra: Document | None = None,
        drop_published: bool = False,
    ) -> InstanceDoc | None:
        """Apply transitions if nobody else did first; returns the new document or None.
        `drop_published`: the outbox holds only events already published, so the new
        ones replace them (which spares clearing them on their own)."""
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
        with self._writing(doc["_id"]):
            done = await self._instances.find_one_and_update(
                {"_id": doc["_id"], "sequence": doc["sequence"]},
                {
                    "$set": {**changes, **({"outbox": events} if drop_published else {})},
                    "$inc": {"sequence": len(steps)},
                    "$push": {
                        "history": {"$each": history},
                        **({} if drop_published else {"outbox": {"$each": events}}),
                    },
                },
                return_document=ReturnDocument.AFTER,
            )
        if done is not None:
            self.cache.written(done)
        return done

    async def update_fields(self, key: str, fields: Document) -> Document:
        """Set `fields` (and `updated_at`); returns what was set."""
        written: Document = as_stored_values({**fields, "updated_at": now()})
        with self._writing(key):
            await self._instances.update_one({"_id": key}, {"$set": written})
        self.cache.merge(key, written)
        return written

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

    async def live_clusters(self) -> list[str | None]:
        """The cluster of every instance that is not terminal (None: recorded before
        clusters were, so the home cluster)."""
        clusters: list[str | None] = []
        for state in State:
            if state not in TERMINAL:
                query = self._instances.find({"state": state.value}, {"cluster": 1})
                clusters += [doc.get("cluster") async for doc in query]
        return clusters

    async def all_queued(self) -> list[InstanceDoc]:
        """Every queued instance, for the admission queue's pass."""
        cursor = self._instances.find({"state": State.QUEUED.value}, _QUEUED_INSTANCE_FIELDS)
        return [doc async for doc in cursor]

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
        cleared = {"outbox": [], "has_outbox": False}
        with self._writing(key):
            result = await self._instances.update_one(
                {"_id": key, "sequence": sequence}, {"$set": cleared}
            )
        if result.matched_count:
            self.cache.merge(key, cleared)
