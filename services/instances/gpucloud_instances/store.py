"""The instances service's shared MongoDB access: the collections and their index
plan, the requests every kind answers to, and paging over tenants. Each feature's
own collections are in its package's `store`.

Two rules keep every store correct on FerretDB as well as MongoDB:

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
from collections.abc import Awaitable, Callable
from typing import Literal, TypeVar

from pymongo import ASCENDING, IndexModel
from pymongo.errors import DuplicateKeyError

from gpucloud_libs.clock import now
from gpucloud_libs.mongo import Database, Document, IndexPlan

from .documents import (
    InstanceDoc,
    JobDoc,
    ServiceDoc,
)

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
#: The Kubernetes clusters workloads are placed in (clusters/).
CLUSTERS = "clusters"


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
