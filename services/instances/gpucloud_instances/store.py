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
import logging
from collections.abc import Awaitable, Callable, Iterable, Iterator
from datetime import UTC, datetime
from typing import Literal, TypeVar

from pymongo import ASCENDING, IndexModel, ReturnDocument
from pymongo.errors import DuplicateKeyError, PyMongoError

from gpucloud_libs.clock import now
from gpucloud_libs.mongo import Collection, Database, Document, IndexPlan, typed
from gpucloud_libs.outbox import OutboxEntry

from .documents import (
    EndedServiceDoc,
    InstanceDoc,
    JobDoc,
    ServiceConfigDoc,
    ServiceDoc,
)
from .job_lifecycle import LIVE as LIVE_JOB_STATES
from .job_lifecycle import JobState
from .lifecycle import TERMINAL, State, Step
from .list_model import InstanceListModel

DocT = TypeVar("DocT", InstanceDoc, JobDoc, ServiceDoc)


SPECS = "specs"


TENANTS = "tenants"


INSTANCES = "instances"


TENANT_NAMESPACES = "tenant_namespaces"


REQUESTS = "instance_requests"


IDEMPOTENCY = "idempotency_keys"


WAKEUPS = "wakeups"


STOCK_OPERATIONS = "stock_operations"


STOCKS = "stocks"


JOBS = "jobs"


SERVICES = "inference_services"


SERVICE_CONFIGS = "inference_service_configs"


SERVICE_LOAD = "inference_service_load"


#: The replica runs of deleted services, kept so that their bills stay checkable.
ENDED_SERVICES = "ended_inference_services"


REGISTRY_CREDENTIALS = "registry_credentials"


QUEUE_LINES = "queue_lines"


QUEUE_BANDS = "queue_bands"


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
    JOBS: [
        IndexModel(
            [("tenant_id", ASCENDING), ("job_id", ASCENDING)], unique=True, name="tenant_job"
        ),
        IndexModel([("state", ASCENDING)], name="state"),
        IndexModel([("has_outbox", ASCENDING)], name="has_outbox"),
        IndexModel([("tenant_id", ASCENDING), ("state", ASCENDING)], name="tenant_state"),
    ],
    SERVICES: [
        IndexModel(
            [("tenant_id", ASCENDING), ("service_id", ASCENDING)],
            unique=True,
            name="tenant_service",
        ),
        IndexModel([("has_outbox", ASCENDING)], name="has_outbox"),
    ],
    SERVICE_CONFIGS: [IndexModel([("key", ASCENDING)], name="key")],
    SERVICE_LOAD: [IndexModel([("key", ASCENDING)], name="key")],
    ENDED_SERVICES: [IndexModel([("key", ASCENDING)], name="key")],
    REGISTRY_CREDENTIALS: [
        IndexModel([("tenant_id", ASCENDING), ("registry", ASCENDING)], name="tenant_registry")
    ],
}


#: `stop` and `delete` an instance or an inference service; `cancel` a job.
RequestKind = Literal["stop", "delete", "cancel", "start"]


#: The most tenants the platform admin's list queries at once.
MAX_TENANTS_PER_ROUND = 8


#: How long a failed fill of the list model waits before it reads again.
LIST_FILL_RETRY_S = 2.0


log = logging.getLogger(__name__)


def instance_key(tenant_id: str, instance_id: str) -> str:
    return f"{tenant_id}/{instance_id}"


def service_request_key(doc: ServiceDoc) -> str:
    """Where an inference service's requests are recorded (RequestStore)."""
    return f"{doc['_id']}#{doc['incarnation']}"


async def walk_tenants(
    tenants: list[str],
    after: str | None,
    limit: int,
    one_tenant: Callable[[str, str | None, int], Awaitable[list[DocT]]],
) -> list[DocT]:
    """The platform admin's list of instances or jobs, walked tenant by tenant.

    FerretDB hands an equality on `tenant_id` to PostgreSQL's index but sorts and
    limits in its own process, after decoding every matching document: one query
    over all tenants decoded the whole fleet for each page (2.2 s at 5,000
    instances). A query per tenant decodes only the tenants the page reaches. An
    `_id` starts with its tenant and a `/`, so the cursor names the tenant to
    resume in. The page is ordered by tenant, then by `_id`. `tenants` must hold
    every tenant that has documents (a tenant's document outlives it).
    """
    resume_in = after.split("/", 1)[0] if after else None
    ordered = sorted(tenant for tenant in tenants if resume_in is None or tenant >= resume_in)
    docs: list[DocT] = []
    # FerretDB decodes a tenant's every match whatever the limit, so a round asks
    # one tenant first, and twice as many each time a round leaves the page short.
    round_size, start = 1, 0
    while start < len(ordered) and len(docs) < limit:
        wanted = limit - len(docs)
        pages = await asyncio.gather(
            *(
                one_tenant(tenant, after if tenant == resume_in else None, wanted)
                for tenant in ordered[start : start + round_size]
            )
        )
        for page in pages:
            docs.extend(page)
        start += round_size
        round_size = min(round_size * 2, MAX_TENANTS_PER_ROUND)
    return docs[:limit]


class DuplicateInstance(Exception):
    """An instance with the same tenant and instanceID (or Idempotency-Key) exists."""


#: What the admission queue reads of a queued instance.
_QUEUED_INSTANCE_FIELDS = {
    "_id": 1, "tenant_id": 1, "gpu_type": 1, "gpu_count": 1, "gpu_resource": 1, "gpu_weight": 1,
    "priority": 1, "created_at": 1, "queue_reason": 1,
}  # fmt: skip


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


class RequestStore:
    """What the API asks of the controller, as inserted documents only."""

    def __init__(self, db: Database) -> None:
        self._requests = db[REQUESTS]
        self._wakeups = db[WAKEUPS]

    async def request(self, key: str, kind: RequestKind, *, reason: str | None = None) -> None:
        """Record a `stop` or `delete` request once; repeating it changes nothing (the
        first request's reason stands). The caller wakes the controller."""
        with contextlib.suppress(DuplicateKeyError):
            await self._requests.insert_one(
                {"_id": f"{key}|{kind}", "key": key, "kind": kind, "at": now(), "reason": reason}
            )

    async def request_start(self, key: str, sequence: int) -> None:
        """Ask for a start of the instance as it is at `sequence` (stopped or failed). A
        start is asked again after each stop, so it replaces the last one; the
        controller carries out only one whose sequence is still the instance's."""
        await self._requests.replace_one(
            {"_id": f"{key}|start"},
            {"key": key, "kind": "start", "at": now(), "sequence": sequence},
            upsert=True,
        )

    async def start_request(self, key: str) -> Document | None:
        return await self._requests.find_one({"_id": f"{key}|start"})

    async def stop_pending_start(self, key: str) -> None:
        """A stop asked while a start is still to be carried out: it replaces the stop of
        the last stay, so that it is newer than the start, which it cancels."""
        await self._requests.replace_one(
            {"_id": f"{key}|stop"},
            {"key": key, "kind": "stop", "at": now(), "reason": None},
            upsert=True,
        )

    async def keys_requested(self, kind: RequestKind) -> list[str]:
        """Every instance with a `kind` request recorded (for starts: still to do)."""
        return [doc["key"] async for doc in self._requests.find({"kind": kind}, {"key": 1})]

    async def stop_request(self, key: str) -> Document | None:
        """The instance's stop request, with its reason (None: the owner's own stop)."""
        return await self._requests.find_one({"_id": f"{key}|stop"})

    async def requested(self, key: str, kind: RequestKind) -> bool:
        """Whether a `kind` request was recorded for the instance (one lookup by `_id`).
        A stop matters while the instance is live, a delete once it is terminal."""
        return await self._requests.find_one({"_id": f"{key}|{kind}"}, {"_id": 1}) is not None

    async def requested_of(self, keys: list[str], kind: RequestKind) -> set[str]:
        """Which of `keys` have a `kind` request, in one query."""
        ids = [f"{key}|{kind}" for key in keys]
        return {doc["key"] async for doc in self._requests.find({"_id": {"$in": ids}}, {"key": 1})}

    async def forget(self, key: str, kind: RequestKind) -> None:
        """Carried out, for a name that can be used again (an inference service's), or
        a stop that must not outlive the start after it."""
        await self._requests.delete_one({"_id": f"{key}|{kind}"})

    async def wake(self, key: str) -> None:
        await self._wakeups.insert_one({"key": key, "at": now()})

    async def take_wakeups(self, limit: int = 500) -> list[str]:
        docs = [doc async for doc in self._wakeups.find({}).limit(limit)]
        if docs:
            await self._wakeups.delete_many({"_id": {"$in": [doc["_id"] for doc in docs]}})
        return [doc["key"] for doc in docs]


#: What the admission queue's pass reads of a job.
_QUEUE_FIELDS = {
    "_id": 1, "tenant_id": 1, "state": 1, "gpu_type": 1, "gpu_count": 1, "gpu_resource": 1,
    "gpu_weight": 1, "parallelism": 1, "nodes": 1, "priority": 1, "created_at": 1,
    "admitted_at": 1, "queue_reason": 1,
}  # fmt: skip


class JobStore:
    """Batch jobs. Like an instance, a job document is written by the API once (its
    insert) and then by the controller's worker for that job alone; a cancel is an
    inserted request (RequestStore)."""

    def __init__(self, db: Database) -> None:
        self._jobs: Collection[JobDoc] = typed(db, JOBS, JobDoc)
        self._tenants = db[TENANTS]
        self._idempotency = db[IDEMPOTENCY]

    async def insert(self, document: JobDoc) -> None:
        try:
            await self._jobs.insert_one(document)
        except DuplicateKeyError as error:
            raise DuplicateInstance(str(error)) from error

    async def get(self, key: str) -> JobDoc | None:
        return await self._jobs.find_one({"_id": key})

    async def by_idempotency_key(self, tenant_id: str, idempotency_key: str) -> JobDoc | None:
        mapping = await self._idempotency.find_one(
            {"_id": _job_idempotency(tenant_id, idempotency_key)}
        )
        return None if mapping is None else await self.get(mapping["job"])

    async def record_idempotency_key(self, tenant_id: str, idempotency_key: str, key: str) -> bool:
        """False when a concurrent request already took this key."""
        try:
            await self._idempotency.insert_one(
                {"_id": _job_idempotency(tenant_id, idempotency_key), "job": key}
            )
        except DuplicateKeyError:
            return False
        return True

    async def page(
        self, tenant_id: str | None, *, states: list[str] | None, after: str | None, limit: int
    ) -> list[JobDoc]:
        """Up to `limit` of a tenant's jobs after the `_id` `after`, in `_id` order;
        with `tenant_id` None, every tenant's, tenant by tenant (`walk_tenants`)."""
        if tenant_id is None:
            tenants = [doc["_id"] async for doc in self._tenants.find({}, {"_id": 1})]

            async def one_tenant(tenant: str, after: str | None, wanted: int) -> list[JobDoc]:
                return await self.page(tenant, states=states, after=after, limit=wanted)

            return await walk_tenants(tenants, after, limit, one_tenant)
        query: Document = {"tenant_id": tenant_id}
        if states:
            query["state"] = states[0] if len(states) == 1 else {"$in": states}
        if after:
            query["_id"] = {"$gt": after}
        cursor = self._jobs.find(query, {"outbox": 0}).sort("_id", ASCENDING).limit(limit)
        return [doc async for doc in cursor]

    async def all_queued(self) -> list[JobDoc]:
        """Every queued job, for the admission queue's pass."""
        return await self._in_state(JobState.QUEUED)

    async def admitted(self) -> list[JobDoc]:
        """Every admitted job that has not started running yet."""
        return await self._in_state(JobState.ADMITTED)

    async def holding(self, tenant_ids: list[str]) -> list[JobDoc]:
        """The admitted, running and preempting jobs of `tenant_ids`: what a reclaim may
        preempt, or is preempting."""
        query = {
            "tenant_id": {"$in": tenant_ids},
            "state": {"$in": [s.value for s in (JobState.ADMITTED, JobState.RUNNING,
                                                 JobState.PREEMPTING)]},
        }  # fmt: skip
        return [doc async for doc in self._jobs.find(query, _QUEUE_FIELDS)]

    async def _in_state(self, state: JobState) -> list[JobDoc]:
        return [doc async for doc in self._jobs.find({"state": state.value}, _QUEUE_FIELDS)]

    async def live_keys(self) -> list[str]:
        """Every job that has not ended (one equality query per state, for FerretDB)."""
        keys: list[str] = []
        for state in LIVE_JOB_STATES:
            keys += [
                doc["_id"] async for doc in self._jobs.find({"state": state.value}, {"_id": 1})
            ]
        return keys

    async def keys_with_outbox(self) -> list[str]:
        return [doc["_id"] async for doc in self._jobs.find({"has_outbox": True}, {"_id": 1})]

    async def save(
        self, doc: JobDoc, changes: Document, events: list[OutboxEntry]
    ) -> JobDoc | None:
        """Apply the controller's changes if the document is still the one it read;
        returns the new document, or None when it moved meanwhile."""
        update: Document = {
            "$set": {**changes, "updated_at": now(), **({"has_outbox": True} if events else {})},
            "$inc": {"revision": 1},
        }
        if events:
            update["$push"] = {"outbox": {"$each": events}}
        return await self._jobs.find_one_and_update(
            {"_id": doc["_id"], "revision": doc["revision"]},
            update,
            return_document=ReturnDocument.AFTER,
        )

    async def clear_outbox(self, key: str, revision: int) -> None:
        """Drop the published events, unless the document changed meanwhile."""
        await self._jobs.update_one(
            {"_id": key, "revision": revision}, {"$set": {"outbox": [], "has_outbox": False}}
        )


def _job_idempotency(tenant_id: str, idempotency_key: str) -> str:
    # Apart from the instances' keys: the same key may name an instance and a job.
    return f"job|{tenant_id}|{idempotency_key}"


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
        self, tenant_id: str | None, *, after: str | None, limit: int
    ) -> list[ServiceDoc]:
        """As JobStore.page: a tenant's services in `_id` order, or every tenant's."""
        if tenant_id is None:
            tenants = [doc["_id"] async for doc in self._tenants.find({}, {"_id": 1})]

            async def one_tenant(tenant: str, after: str | None, wanted: int) -> list[ServiceDoc]:
                return await self.page(tenant, after=after, limit=wanted)

            return await walk_tenants(tenants, after, limit, one_tenant)
        query: Document = {"tenant_id": tenant_id}
        if after:
            query["_id"] = {"$gt": after}
        cursor = self._services.find(query, {"outbox": 0}).sort("_id", ASCENDING).limit(limit)
        return [doc async for doc in cursor]

    async def keys(self, tenant_id: str | None = None) -> list[str]:
        query: Document = {} if tenant_id is None else {"tenant_id": tenant_id}
        return [doc["_id"] async for doc in self._services.find(query, {"_id": 1})]

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
            "deleted_at": deleted_at, "runs": doc["runs"],
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
