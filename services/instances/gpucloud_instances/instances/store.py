"""The instances' collection: admitted instances, their transitions and outboxes, and the lists read from memory."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime

from pymongo import ASCENDING, ReturnDocument
from pymongo.errors import DuplicateKeyError, PyMongoError

from gpucloud_libs.clock import now
from gpucloud_libs.mongo import Collection, Database, Document, typed
from gpucloud_libs.outbox import OutboxEntry

from ..documents import InstanceDoc
from ..lifecycle import TERMINAL, State, Step
from ..list_model import InstanceListModel
from ..store import (
    IDEMPOTENCY,
    INSTANCES,
    TENANTS,
    DuplicateInstance,
    walk_tenants,
)

#: What the admission queue reads of a queued instance.
_QUEUED_INSTANCE_FIELDS = {
    "_id": 1, "tenant_id": 1, "gpu_type": 1, "gpu_count": 1, "gpu_resource": 1, "gpu_weight": 1,
    "priority": 1, "created_at": 1, "queue_reason": 1,
}  # fmt: skip


log = logging.getLogger(__name__)

#: How long a failed fill of the list model waits before it reads again.
LIST_FILL_RETRY_S = 2.0


class InstanceStore:
    """Instance documents. With a list model (list_model.py), every write is handed
    to it too, and pages and the API's reads come from it once it is filled."""

    def __init__(self, db: Database, lists: InstanceListModel | None = None) -> None:
        self._instances: Collection[InstanceDoc] = typed(db, INSTANCES, InstanceDoc)
        self._tenants = db[TENANTS]
        self._idempotency = db[IDEMPOTENCY]
        self._lists = lists

    async def fill_lists(self) -> None:
        """Fill the list model from the store, once, retrying until the store answers
        (pages come from the store meanwhile)."""
        if self._lists is None:
            return

        async def every_instance() -> list[InstanceDoc]:
            query = {"state": {"$ne": State.DELETED.value}}
            return [doc async for doc in self._instances.find(query, {"outbox": 0})]

        while True:
            try:
                await self._lists.fill(every_instance)
                return
            except PyMongoError as error:
                log.warning(
                    "filling the instance lists failed; retrying", extra={"error": str(error)}
                )
                await asyncio.sleep(LIST_FILL_RETRY_S)

    @contextlib.contextmanager
    def _writing(self, key: str) -> Iterator[None]:
        """A write that fails may have landed: the list model reads it again."""
        try:
            yield
        except BaseException:
            if self._lists is not None:
                self._lists.unsure(key)
            raise

    async def insert(self, document: InstanceDoc) -> None:
        try:
            with self._writing(document["_id"]):
                await self._instances.insert_one(document)
        except DuplicateKeyError as error:
            raise DuplicateInstance(str(error)) from error
        if self._lists is not None:
            self._lists.written(document)

    async def get(self, key: str) -> InstanceDoc | None:
        return await self._instances.find_one({"_id": key})

    async def current(self, key: str) -> InstanceDoc | None:
        """`get`, from the list model where it holds the instance (the API's reads;
        the controller reads the store)."""
        if lists := self._memory(None):
            await self._refresh_unsure()
            doc = lists.get(key)
            if doc is not None:
                return doc
        return await self.get(key)

    async def _refresh_unsure(self) -> None:
        if self._lists is None:
            return
        keys = self._lists.take_unsure()
        if keys:
            docs = await asyncio.gather(*(self.get(key) for key in keys))
            for key, doc in zip(keys, docs, strict=True):
                self._lists.refreshed(key, doc)

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
        if self._lists is not None:
            self._lists.removed(key)

    async def page(
        self,
        tenant_id: str | None,
        *,
        states: list[str] | None,
        spec_name: str | None,
        after: str | None,
        limit: int,
    ) -> list[InstanceDoc]:
        """Up to `limit` of a tenant's instances after the `_id` `after`, in `_id`
        order; with `tenant_id` None, every tenant's (see `_every_tenant_page`)."""
        if tenant_id is None:
            return await self._every_tenant_page(
                states=states, spec_name=spec_name, after=after, limit=limit
            )
        if lists := self._memory(states):
            await self._refresh_unsure()
            return lists.page(
                tenant_id, states=states, spec_name=spec_name, after=after, limit=limit
            )
        query: Document = {"tenant_id": tenant_id}
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
        self, *, states: list[str] | None, spec_name: str | None, after: str | None, limit: int
    ) -> list[InstanceDoc]:
        async def one_tenant(tenant: str, after: str | None, wanted: int) -> list[InstanceDoc]:
            return await self.page(
                tenant, states=states, spec_name=spec_name, after=after, limit=wanted
            )

        if lists := self._memory(states):
            tenants = lists.tenants()  # those holding any instance not deleted
        else:
            tenants = [doc["_id"] async for doc in self._tenants.find({}, {"_id": 1})]
        return await walk_tenants(tenants, after, limit, one_tenant)

    def _memory(self, states: list[str] | None) -> InstanceListModel | None:
        """The list model, where a page with these states comes from it (it holds no
        deleted instance)."""
        if self._lists is None or not self._lists.ready or State.DELETED.value in (states or ()):
            return None
        return self._lists

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
        if done is not None and self._lists is not None:
            self._lists.written(done)
        return done

    async def update_fields(self, key: str, fields: Document) -> Document:
        """Set `fields` (and `updated_at`); returns what was set."""
        written = {**fields, "updated_at": now()}
        with self._writing(key):
            await self._instances.update_one({"_id": key}, {"$set": written})
        if self._lists is not None:
            self._lists.merge(key, written)
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
        await self._instances.update_one(
            {"_id": key, "sequence": sequence}, {"$set": {"outbox": [], "has_outbox": False}}
        )
