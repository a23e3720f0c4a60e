"""The jobs' collection: submitted jobs, their runs, transitions and outboxes."""

from __future__ import annotations

from pymongo import ASCENDING, ReturnDocument
from pymongo.errors import DuplicateKeyError

from gpucloud_libs.clock import now
from gpucloud_libs.mongo import Collection, Database, Document, typed
from gpucloud_libs.outbox import OutboxEntry

from ..documents import JobDoc, project_match
from ..job_lifecycle import LIVE as LIVE_JOB_STATES
from ..job_lifecycle import JobState
from ..store import IDEMPOTENCY, JOBS, TENANTS, DuplicateInstance, walk_tenants

#: What the admission queue's pass reads of a job.
_QUEUE_FIELDS = {
    "_id": 1, "tenant_id": 1, "state": 1, "gpu_type": 1, "gpu_count": 1, "gpu_resource": 1,
    "gpu_weight": 1, "parallelism": 1, "nodes": 1, "priority": 1, "created_at": 1,
    "admitted_at": 1, "queue_reason": 1, "user_id": 1, "project": 1,
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
        self, tenant_id: str | None, *, states: list[str] | None, after: str | None, limit: int,
        projects: tuple[str, ...] | None = None,
    ) -> list[JobDoc]:  # fmt: skip
        """Up to `limit` of a tenant's jobs (of these `projects`', if named) after the
        `_id` `after`, in `_id` order; with `tenant_id` None, every tenant's, tenant by
        tenant (`walk_tenants`)."""
        if tenant_id is None:
            tenants = [doc["_id"] async for doc in self._tenants.find({}, {"_id": 1})]

            async def one_tenant(tenant: str, after: str | None, wanted: int) -> list[JobDoc]:
                return await self.page(
                    tenant, states=states, after=after, limit=wanted, projects=projects
                )

            return await walk_tenants(tenants, after, limit, one_tenant)
        query: Document = {"tenant_id": tenant_id}
        if projects is not None:
            query |= project_match(projects)
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

    async def live_clusters(self) -> list[str | None]:
        """The cluster of every job that has not ended (None: the home cluster)."""
        clusters: list[str | None] = []
        for state in LIVE_JOB_STATES:
            query = self._jobs.find({"state": state.value}, {"cluster": 1})
            clusters += [doc.get("cluster") async for doc in query]
        return clusters

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
