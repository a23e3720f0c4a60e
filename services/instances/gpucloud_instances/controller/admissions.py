"""The admission queue's pass over every queued job and instance, and its plan.

One pass (admission_queue.decide) at a time, on the leader, as the work item
ADMISSION. The pass writes nothing itself: it keeps its plan, keyed by each
workload's work item, and wakes those it concerns. Each workload's own worker, the
only writer of its document, carries out its part: claims the quota and starts (an
admitted one), records why it waits (when that changed), or is preempted.
"""

from __future__ import annotations

import asyncio

from gpucloud_libs.clock import aware
from gpucloud_libs.gpu_shares import GpuShare

from ..admission_queue import Queued, Running, TenantShare, Waiting, decide
from ..documents import InstanceDoc, JobDoc
from ..job_lifecycle import JobState
from ..quota_ledger import QuotaLedger
from ..store import InstanceStore, JobStore, TenantStore
from ..wakeups import job_item
from .cache import ClusterCache
from .workqueue import WorkQueue

#: The work item of the pass.
ADMISSION = "admission"
#: How often the pass runs again while anything waits (quota and capacity free up
#: as instances and jobs end).
ADMISSION_RETRY_S = 2.0
#: In the plan: admit now, within the tenant's quota, or borrowing beyond it.
ADMIT = "admit"
BORROW = "borrow"
#: In the plan: preempt this running job, to give its borrowed GPUs back.
PREEMPT = "preempt"

Planned = Waiting | str


class Admissions:
    def __init__(
        self,
        cache: ClusterCache,
        queue: WorkQueue,
        jobs: JobStore,
        instances: InstanceStore,
        tenants: TenantStore,
        quota: QuotaLedger,
    ) -> None:
        self._cache = cache
        self._queue = queue
        self._jobs = jobs
        self._instances = instances
        self._tenants = tenants
        self._quota = quota
        #: The last pass's outcome, by work item.
        self._plan: dict[str, Planned] = {}

    def planned(self, item: str) -> Planned | None:
        return self._plan.get(item)

    def take(self, item: str) -> None:
        """The worker acted on its plan: the next pass plans it again if need be."""
        self._plan.pop(item, None)

    async def plan(self) -> None:
        """One pass over every queued workload."""
        queued_jobs, queued_instances = await asyncio.gather(
            self._jobs.all_queued(), self._instances.all_queued()
        )
        queued = [_queued_job(doc) for doc in queued_jobs] + [
            _queued_instance(doc) for doc in queued_instances
        ]
        if not queued:
            self._plan = {}
            return
        accounting = self._cache.gpu_accounting()
        for doc in await self._jobs.admitted():
            # Admitted, but its pods are not all there yet: their GPUs are spoken for,
            # and its tenant holds them as far as fairness goes.
            pods = self._cache.job_pods.get(doc["_id"], {})
            missing = max(doc["parallelism"] - len(pods), 0) * doc["gpu_count"]
            gpu_type = GpuShare.of(doc).capacity_key(doc["gpu_type"])
            accounting.free[gpu_type] = max(accounting.free.get(gpu_type, 0) - missing, 0)
            held = accounting.held.setdefault(doc["tenant_id"], {})
            held[gpu_type] = held.get(gpu_type, 0) + missing
        tenant_docs, usages = await asyncio.gather(self._tenants.all(), self._quota.usages())
        active = {doc["_id"]: doc for doc in tenant_docs if doc["status"] == "active"}
        borrowers = [
            tenant_id for tenant_id, (_, gpus) in usages.items()
            if tenant_id in active and gpus > active[tenant_id]["quota"]["max_gpus"]
        ]  # fmt: skip
        holding = await self._jobs.holding(borrowers) if borrowers else []
        involved = {item.tenant_id for item in queued} | set(borrowers)
        tenants: dict[str, TenantShare] = {}
        for tenant_id in sorted(involved & active.keys()):
            # Tenants unknown here yet, or suspended, are left out: their work waits.
            quota = active[tenant_id]["quota"]
            workloads, gpus = usages.get(tenant_id, (0, 0))
            tenants[tenant_id] = TenantShare(
                quota["max_gpus"], quota["max_instances"], gpus, workloads,
                accounting.held.get(tenant_id, {}),
                weight=active[tenant_id].get("queue_weight", 1.0),
                borrow_gpus=quota.get("borrow_gpus", 0),
            )  # fmt: skip
        decision = decide(
            queued, tenants, accounting.free, accounting.capacity,
            running=[_running(doc) for doc in holding if doc["state"] != JobState.PREEMPTING],
            releasing=[_running(doc) for doc in holding if doc["state"] == JobState.PREEMPTING],
            node_free=accounting.node_free,
        )  # fmt: skip
        self._plan = (
            {item: BORROW if item in decision.borrowing else ADMIT for item in decision.admit}
            | decision.waiting
            | {item: PREEMPT for item in decision.preempt}
        )
        for item in decision.preempt:
            self._queue.wake(item)
        reasons = {job_item(doc["_id"]): doc.get("queue_reason") for doc in queued_jobs} | {
            doc["_id"]: doc.get("queue_reason") for doc in queued_instances
        }
        for item, recorded in reasons.items():
            planned = self._plan.get(item)
            if planned in (ADMIT, BORROW) or (
                isinstance(planned, Waiting) and planned.reason != recorded
            ):
                self._queue.wake(item)
        if decision.waiting:
            self._queue.wake_later(ADMISSION_RETRY_S, ADMISSION)


def _queued_job(doc: JobDoc) -> Queued:
    share, units = GpuShare.of(doc), doc["gpu_count"] * doc["parallelism"]
    return Queued(
        job_item(doc["_id"]), doc["tenant_id"], share.capacity_key(doc["gpu_type"]),
        share.quota_gpus(units), doc["priority"], aware(doc["created_at"]), may_borrow=True,
        units=units, spread=doc.get("nodes") or 0,
    )  # fmt: skip


def _queued_instance(doc: InstanceDoc) -> Queued:
    share = GpuShare.of(doc)
    return Queued(
        doc["_id"], doc["tenant_id"], share.capacity_key(doc["gpu_type"]),
        share.quota_gpus(doc["gpu_count"]), doc.get("priority", 0), aware(doc["created_at"]),
        units=doc["gpu_count"],
    )  # fmt: skip


def _running(doc: JobDoc) -> Running:
    share, units = GpuShare.of(doc), doc["gpu_count"] * doc["parallelism"]
    return Running(
        job_item(doc["_id"]), doc["tenant_id"], share.capacity_key(doc["gpu_type"]),
        share.quota_gpus(units), doc["priority"], aware(doc["admitted_at"] or doc["created_at"]),
        units=units,
    )  # fmt: skip
