"""The admission queue's pass over every queued job and instance, and its plan.

One pass (queue.decision.decide) at a time, on the leader, as the work item
ADMISSION. The pass writes no workload itself: it keeps its plan, keyed by each
workload's work item, and wakes those it concerns. Each workload's own worker, the
only writer of its document, carries out its part: claims the quota and starts (an
admitted one), records why it waits (when that changed), or is preempted.

The pass reads the queue from memory, not from the store: the workers keep the
waiting room (`WaitingRoom`) as they read and write each workload's document, and
the leader fills it from the store once, before its workers start. A pass then
costs no query per queued workload; at 10,000 queued it read them all, each time.
It publishes each tenant's line (QueueLineStore), for the places the API shows.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from gpucloud_libs.clock import aware
from gpucloud_libs.gpu_shares import GpuShare
from gpucloud_libs.naming import DEFAULT_PROJECT

from ..admission import project_cap
from ..controller.capacity import GpuAccounting, across_clusters, pool_of
from ..controller.runtimes import ClusterRuntimes
from ..controller.workqueue import WorkQueue
from ..documents import InstanceDoc, JobDoc, TenantDoc, workload_project
from ..job_lifecycle import JobState
from ..lifecycle import State
from ..quota_ledger import QuotaLedger, Usages
from ..tenancy.store import TenantStore
from ..wakeups import ADMISSION, WorkItem, instance_item, job_item
from .decision import Cap, CapKey, Queued, Running, TenantShare, Waiting, decide
from .documents import QueueLineDoc
from .line import Line
from .store import QueueLineStore

#: How often the pass runs again while anything waits (quota and capacity free up
#: as instances and jobs end).
ADMISSION_RETRY_S = 2.0
#: In the plan: admit now, within the tenant's quota, or borrowing beyond it.
ADMIT = "admit"
BORROW = "borrow"
#: In the plan: preempt this running job, to give its borrowed GPUs back.
PREEMPT = "preempt"

Planned = Waiting | str


@dataclass(frozen=True)
class Starting:
    """An admitted job whose pods are not all there yet: their GPUs are spoken for."""

    key: str
    tenant_id: str
    cluster: str
    pool: str
    pods: int
    units_per_pod: int


@dataclass
class WaitingRoom:
    """What the pass knows of the queue, kept as workloads are read and written: each
    queued workload by work item, the reason its document records, and the admitted
    jobs still starting. Jobs are noted by their workers, instances by the workload
    cache as the store writes them. Only the leader keeps it, from its fill on (one
    event loop). Pools are named with their cluster (`pool_of`; `home` for workloads
    recorded before clusters were)."""

    home: str

    queued: dict[str, Queued] = field(default_factory=dict)
    recorded: dict[str, str | None] = field(default_factory=dict)
    starting: dict[str, Starting] = field(default_factory=dict)
    #: Filled for this leadership: what is written elsewhere is not noted.
    open: bool = False

    def job(self, doc: JobDoc) -> None:
        """Note a job as its worker just read or wrote it."""
        item = job_item(doc["_id"])
        name = str(item)
        state = JobState(doc["state"])
        if state == JobState.QUEUED:
            self._wait(queued_job(doc, self.home), doc.get("queue_reason"))
        else:
            self.leave(item)
        if state == JobState.ADMITTED:
            self.starting[name] = Starting(
                doc["_id"], doc["tenant_id"], doc.get("cluster") or self.home,
                pool_of(doc, self.home), doc["parallelism"], doc["gpu_count"],
            )  # fmt: skip
        else:
            self.starting.pop(name, None)

    def instance_written(self, key: str, doc: InstanceDoc | None) -> None:
        """The workload cache's observer: an instance as written or read, or gone."""
        if not self.open:
            return
        if doc is None or not doc.get("admitted"):
            self.forget(instance_item(key))
        else:
            self.instance(doc)

    def instance(self, doc: InstanceDoc) -> None:
        """Note a queued or admitted instance as it now is."""
        if doc["state"] == State.QUEUED.value:
            self._wait(queued_instance(doc, self.home), doc.get("queue_reason"))
        else:
            self.leave(instance_item(doc["_id"]))

    def leave(self, item: WorkItem) -> None:
        self.queued.pop(str(item), None)
        self.recorded.pop(str(item), None)

    def forget(self, item: WorkItem) -> None:
        """The workload's document is gone."""
        self.leave(item)
        self.starting.pop(str(item), None)

    def clear(self) -> None:
        self.open = False
        self.queued.clear()
        self.recorded.clear()
        self.starting.clear()

    def _wait(self, queued: Queued, reason: str | None) -> None:
        self.queued[queued.key] = queued
        self.recorded[queued.key] = reason


#: The jobs of these tenants that hold GPUs (admitted, running or preempting): those a
#: reclaim may preempt, and those whose GPUs a preemption is freeing.
Holding = Callable[[list[str]], Awaitable[list[JobDoc]]]


class Admissions:
    def __init__(
        self,
        runtimes: ClusterRuntimes,
        queue: WorkQueue,
        holding: Holding,
        tenants: TenantStore,
        quota: QuotaLedger,
        lines: QueueLineStore,
    ) -> None:
        self._runtimes = runtimes
        self._queue = queue
        self._holding = holding
        self._tenants = tenants
        self._quota = quota
        self._lines = lines
        self.room = WaitingRoom(runtimes.home.name)
        #: The last pass's outcome, by work item.
        self._plan: dict[str, Planned] = {}
        #: Each tenant's line as last published (None: whatever a former leader left).
        #: Every pass publishes the lines that changed, so that a wait's reason, which
        #: its worker records from the plan, and its place in the line agree.
        self._published: dict[str, Line | None] = {}

    def fill(self, jobs: list[JobDoc], instances: list[InstanceDoc], published: list[str]) -> None:
        """The queue as the store holds it, once per leadership, before the workers
        start (queued and admitted jobs, queued instances, the tenants whose lines are
        published): from then on they keep the waiting room."""
        self.reset()
        self._published = dict.fromkeys(published)
        for doc in jobs:
            self.room.job(doc)
        for instance in instances:
            self.room.instance(instance)
        self.room.open = True

    def reset(self) -> None:
        """Leadership lost: the next leader fills its room from the store."""
        self.room.clear()
        self._plan = {}
        self._published = {}

    def planned(self, item: WorkItem) -> Planned | None:
        return self._plan.get(str(item))

    def take(self, item: WorkItem) -> None:
        """The worker acted on its plan: the next pass plans it again if need be."""
        self._plan.pop(str(item), None)

    async def plan(self) -> None:
        """One pass over every queued workload."""
        if not self.room.queued:
            self._plan = {}
            await self._publish({}, {})
            return
        tenant_docs, usages = await asyncio.gather(self._tenants.all(), self._quota.usages())
        active = {doc["_id"]: doc for doc in tenant_docs if doc["status"] == "active"}
        borrowers = [
            tenant_id for tenant_id, (_, gpus) in usages.tenants.items()
            if tenant_id in active and gpus > active[tenant_id]["quota"]["max_gpus"]
        ]  # fmt: skip
        holding = await self._holding(borrowers) if borrowers else []
        # What is in memory is read after the last await: a job the store no longer
        # shows preempting (its pods gone, queued again) then has no pod counted here
        # either. Read before, its gone pods held GPUs that the store said were free
        # of it, and the reclaim preempted one job too many.
        queued = list(self.room.queued.values())
        accounting = self._gpus_spoken_for()
        involved = {item.tenant_id for item in queued} | set(borrowers)
        tenants: dict[str, TenantShare] = {}
        for tenant_id in sorted(involved & active.keys()):
            # Tenants unknown here yet, or suspended, are left out: their work waits.
            quota = active[tenant_id]["quota"]
            workloads, gpus = usages.tenants.get(tenant_id, (0, 0))
            tenants[tenant_id] = TenantShare(
                quota["max_gpus"], quota["max_instances"], gpus, workloads,
                accounting.held.get(tenant_id, {}),
                weight=active[tenant_id].get("queue_weight", 1.0),
                borrow_gpus=quota.get("borrow_gpus", 0),
            )  # fmt: skip
        home = self.room.home
        decision = decide(
            queued, tenants, accounting.free, accounting.capacity,
            running=[_running(d, home) for d in holding if d["state"] != JobState.PREEMPTING],
            releasing=[_running(d, home) for d in holding if d["state"] == JobState.PREEMPTING],
            node_free=accounting.node_free, caps=_caps(tenants, active, usages),
        )  # fmt: skip
        self._plan = (
            {item: BORROW if item in decision.borrowing else ADMIT for item in decision.admit}
            | decision.waiting
            | {item: PREEMPT for item in decision.preempt}
        )
        for name in [*decision.preempt, *decision.admit]:
            self._queue.wake(WorkItem.parse(name))
        if decision.waiting:
            self._queue.wake_later(ADMISSION_RETRY_S, ADMISSION)
        await self._publish(decision.waiting, {item.key: item for item in queued})
        # The places just published and the reasons the workers record now agree.
        for name, recorded in list(self.room.recorded.items()):
            planned = self._plan.get(name)
            if isinstance(planned, Waiting) and planned.reason != recorded:
                self._queue.wake(WorkItem.parse(name))

    def _gpus_spoken_for(self) -> GpuAccounting:
        """Every cluster's GPUs as its watch sees them, with the pods admitted jobs
        have yet to make counted as held: their GPUs are spoken for."""
        accounting = across_clusters(
            {runtime.name: runtime.cache.gpu_accounting() for runtime in self._runtimes}
        )
        for job in self.room.starting.values():
            runtime = self._runtimes.of(job.cluster)
            pods = {} if runtime is None else runtime.cache.job_pods.get(job.key, {})
            missing = max(job.pods - len(pods), 0) * job.units_per_pod
            accounting.free[job.pool] = max(accounting.free.get(job.pool, 0) - missing, 0)
            held = accounting.held.setdefault(job.tenant_id, {})
            held[job.pool] = held.get(job.pool, 0) + missing
        return accounting

    async def _publish(self, waiting: dict[str, Waiting], queued: dict[str, Queued]) -> None:
        """Publish each tenant's line that changed since the last time."""
        places: dict[str, list[tuple[int, Queued]]] = {}
        for item, place in waiting.items():
            places.setdefault(queued[item].tenant_id, []).append((place.position, queued[item]))
        lines = {tenant: Line() for tenant in self._published}
        for tenant, entries in places.items():
            entries.sort(key=lambda entry: entry[0])
            lines[tenant] = Line(
                [item.key for _, item in entries],
                [item.gpus for _, item in entries],
                [item.priority for _, item in entries],
            )
        changed = {t: line for t, line in lines.items() if self._published.get(t) != line}
        await asyncio.gather(*(self._publish_line(t, line) for t, line in changed.items()))
        self._published = {t: line for t, line in lines.items() if line.items}

    async def _publish_line(self, tenant_id: str, line: Line) -> None:
        await self._lines.publish(
            QueueLineDoc(_id=tenant_id, items=line.items, gpus=line.gpus,
                         priorities=line.priorities),
            line.bands,
        )  # fmt: skip


def _caps(
    tenants: dict[str, TenantShare], active: dict[str, TenantDoc], usages: Usages
) -> dict[CapKey, Cap]:
    """The GPU limits of the users of the tenants in the pass that have one, and the
    shares of their projects that have one (`default`'s: what the others leave)."""
    caps: dict[CapKey, Cap] = {}
    for tenant_id in tenants:
        tenant = active[tenant_id]
        for user_id, limits in (tenant.get("user_limits") or {}).items():
            max_gpus = limits.get("max_gpus")
            if max_gpus is not None:
                held = usages.users.get((tenant_id, user_id), 0)
                caps[tenant_id, "user_limit", user_id] = Cap(max_gpus, held)
        for project in [DEFAULT_PROJECT, *(tenant.get("projects") or {})]:
            share = project_cap(tenant, project)
            if share is not None:
                held = usages.projects.get((tenant_id, project), 0)
                borrow = project_cap(tenant, project, may_borrow=True)
                caps[tenant_id, "project_quota", project] = Cap(share, held, (borrow or 0) - share)
    return caps


def queued_job(doc: JobDoc, home: str) -> Queued:
    share, units = GpuShare.of(doc), doc["gpu_count"] * doc["parallelism"]
    return Queued(
        str(job_item(doc["_id"])), doc["tenant_id"], pool_of(doc, home),
        share.quota_gpus(units), doc["priority"], aware(doc["created_at"]), may_borrow=True,
        units=units, spread=doc.get("nodes") or 0, user_id=doc.get("user_id"),
        project=workload_project(doc),
    )  # fmt: skip


def queued_instance(doc: InstanceDoc, home: str) -> Queued:
    share = GpuShare.of(doc)
    return Queued(
        str(instance_item(doc["_id"])), doc["tenant_id"], pool_of(doc, home),
        share.quota_gpus(doc["gpu_count"]), doc.get("priority", 0), aware(doc["created_at"]),
        units=doc["gpu_count"], user_id=doc.get("user_id"), project=workload_project(doc),
    )  # fmt: skip


def _running(doc: JobDoc, home: str) -> Running:
    share, units = GpuShare.of(doc), doc["gpu_count"] * doc["parallelism"]
    return Running(
        str(job_item(doc["_id"])), doc["tenant_id"], pool_of(doc, home),
        share.quota_gpus(units), doc["priority"], aware(doc["admitted_at"] or doc["created_at"]),
        units=units,
    )  # fmt: skip
