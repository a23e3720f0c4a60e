"""Which queued workloads to admit now: the platform's own admission queue, pure.

Kueue, Volcano, KAI-Scheduler and their kin are not to be had here, so admission
is decided by this module from what the controller knows: the queued workloads
(from the store), each tenant's quota and what it holds (the quota ledger), and
the free GPUs of each type (the watch cache). It has no I/O, so a Kueue-backed
admission could replace it behind the same `decide` call.

The rule, in one pass:
- Within a tenant, higher priority first, then the oldest.
- Between tenants, dominant-resource fair share: the tenant whose weighted
  dominant share is lowest goes next, where

      share(t) = max over GPU types g of  held(t, g) / capacity(g)  /  weight(t)

  and `held` counts what the pass has admitted so far. Ties go to the tenant
  with the fewest GPUs held, then by id, so the order is deterministic.
- A tenant's next workload must fit its quota (its guaranteed share); if it
  does not, the tenant waits for `quota` this pass.
- A workload whose user is at their own GPU limit (a tenant admin's, per user) is
  set aside for `user_limit` this pass, and one whose project holds its share of
  the tenant's quota for `project_quota` (decision 138): the tenant's next
  workload, another user's or project's, goes in its place.
- It must fit the free GPUs of its type; if not, it waits for `capacity`, and
  so does every later workload of that GPU type this pass, whoever's: a big
  job is not starved by smaller ones slipping past it.
- A multi-node job (`spread`) must also find that many nodes, each with one
  pod's GPUs free, or it waits for `capacity` the same way: it is admitted
  whole or not at all.
- Borrowing: once every tenant's guaranteed work is placed, a tenant may go past
  its quota by up to its `borrow_gpus`, on GPUs nobody's guaranteed work waits
  for. Such an admission is marked borrowing.
- Reclaim: a workload within its tenant's quota that finds no free GPUs of its
  type preempts running workloads of tenants that hold more than their quota
  (lowest priority, then the most recently admitted, first), while they still
  do, until enough GPUs come free; it waits for `reclaim` meanwhile. If all of
  them would not be enough, nothing is preempted.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from gpucloud_libs.naming import DEFAULT_PROJECT

WaitReason = Literal["quota", "capacity", "priority", "reclaim", "user_limit", "project_quota"]


class _Holding:
    """What a queued or running workload takes of its pool."""

    gpus: int
    units: int | None

    @property
    def takes(self) -> int:
        return self.gpus if self.units is None else self.units


@dataclass(frozen=True)
class Queued(_Holding):
    """A workload waiting for admission."""

    key: str
    tenant_id: str
    #: The pool its GPUs come from (`GpuShare.capacity_key`): a product, or a shared kind.
    gpu_type: str
    #: GPUs of quota it holds once admitted (all of its pods).
    gpus: int
    priority: int
    created_at: datetime
    #: Whether it may be admitted beyond its tenant's quota (batch jobs; instances never).
    may_borrow: bool = False
    #: What it takes of its pool, where that differs from `gpus` (shared GPUs' slices).
    units: int | None = None
    #: A multi-node job's pods, each needing a node of its own; 0 for any other.
    spread: int = 0
    #: Who started it, held to their own GPU limit (a `Cap`).
    user_id: str | None = None
    #: The project it runs in, held to the project's share (a `Cap`).
    project: str = DEFAULT_PROJECT

    def caps(self) -> tuple[CapKey, ...]:
        """The caps inside its tenant's quota that hold it, the user's first."""
        project: CapKey = (self.tenant_id, "project_quota", self.project)
        if self.user_id is None:
            return (project,)
        return ((self.tenant_id, "user_limit", self.user_id), project)


@dataclass(frozen=True)
class Running(_Holding):
    """An admitted workload that may be preempted to give borrowed GPUs back."""

    key: str
    tenant_id: str
    gpu_type: str
    gpus: int
    priority: int
    admitted_at: datetime
    units: int | None = None


@dataclass(frozen=True)
class TenantShare:
    """A tenant's standing: its quota (guaranteed share), what it holds, its weight."""

    max_gpus: int
    max_workloads: int
    held_gpus: int
    held_workloads: int
    #: Held units by pool (`Queued.gpu_type`), for the dominant share.
    held_by_type: dict[str, int] = field(default_factory=dict)
    weight: float = 1.0
    #: GPUs beyond `max_gpus` it may borrow while nobody's guaranteed work needs them.
    borrow_gpus: int = 0


#: A cap inside a tenant's quota: (tenant, the reason a workload waits at it, the user
#: or project it holds).
CapKey = tuple[str, Literal["user_limit", "project_quota"], str]


@dataclass(frozen=True)
class Cap:
    """A user's own GPU limit, or a project's share, inside their tenant's quota, and
    what they hold; `borrow_gpus`: how far a project's batch jobs may go past it."""

    max_gpus: int
    held_gpus: int
    borrow_gpus: int = 0


@dataclass(frozen=True)
class Waiting:
    #: 1 for the tenant's next workload.
    position: int
    reason: WaitReason
    #: GPUs the tenant's workloads ahead of it ask for.
    gpus_ahead: int


@dataclass(frozen=True)
class Decision:
    #: In the order they were chosen.
    admit: list[str]
    waiting: dict[str, Waiting]
    #: The admitted that go past their tenant's quota (they may be preempted).
    borrowing: set[str] = field(default_factory=set)
    #: Running workloads to preempt, so that guaranteed work gets its GPUs back.
    preempt: list[str] = field(default_factory=list)


def tenant_order(queued: list[Queued]) -> list[Queued]:
    """One tenant's queue: priority, then age, then key."""
    return sorted(queued, key=lambda q: (-q.priority, q.created_at, q.key))


def decide(
    queued: list[Queued],
    tenants: dict[str, TenantShare],
    free: dict[str, int],
    capacity: dict[str, int],
    *,
    running: Sequence[Running] = (),
    releasing: Sequence[Running] = (),
    node_free: dict[str, dict[str, int]] | None = None,
    caps: dict[CapKey, Cap] | None = None,
) -> Decision:
    """Admit what fits now, fairly; say why the rest waits; preempt borrowed GPUs that
    guaranteed work needs.

    `free`: units free per pool right now; `capacity`: units per pool in the fleet
    (the denominator of the dominant share); `running`: the admitted workloads that
    may be preempted; `releasing`: those an earlier pass preempted, whose GPUs are
    being freed (their tenants no longer count them); `node_free`: units free per
    node, by pool, for multi-node jobs; `caps`: the limits of the users that have
    one and the shares of the projects that have one. A workload of a tenant missing from `tenants` (not known
    yet, or suspended) waits for `quota`.
    """
    one_pass = _Pass(queued, tenants, free, capacity, running, releasing, node_free or {})
    return one_pass.with_caps(caps or {}).run()


class _Pass:
    """One admission pass: the guaranteed round, then the borrowing round."""

    def __init__(
        self,
        queued: list[Queued],
        tenants: dict[str, TenantShare],
        free: dict[str, int],
        capacity: dict[str, int],
        running: Sequence[Running],
        releasing: Sequence[Running],
        node_free: dict[str, dict[str, int]],
    ) -> None:
        by_tenant: dict[str, list[Queued]] = defaultdict(list)
        for item in queued:
            by_tenant[item.tenant_id].append(item)
        self.lines = {tenant: deque(tenant_order(items)) for tenant, items in by_tenant.items()}
        self.tenants = tenants
        self.capacity = capacity
        self.held = {t: dict(s.held_by_type) for t, s in tenants.items()}
        self.gpus = {t: s.held_gpus for t, s in tenants.items()}
        self.workloads = {t: s.held_workloads for t, s in tenants.items()}
        self.free = dict(free)
        self.node_free = {pool: dict(nodes) for pool, nodes in node_free.items()}
        #: GPUs per type that preemptions are freeing, not yet promised to anyone.
        self.releasing: dict[str, int] = defaultdict(int)
        for gone in releasing:
            self.releasing[gone.gpu_type] += gone.takes
            if gone.tenant_id in self.tenants:
                self._hold(gone.tenant_id, gone.gpu_type, -gone.takes, -gone.gpus)
                self.workloads[gone.tenant_id] -= 1
        #: Preemptible, the first to go first.
        self.victims = sorted(running, key=lambda r: (r.priority, -r.admitted_at.timestamp()))
        self.blocked: dict[str, WaitReason] = {}  # tenant -> why its next one waits
        self.full_types: set[str] = set()
        self.admit: list[str] = []
        self.borrowing: set[str] = set()
        self.preempt: list[str] = []
        self.caps: dict[CapKey, Cap] = {}
        self.cap_gpus: dict[CapKey, int] = {}
        #: Workloads set aside because their user or project is at its cap, and why.
        self.set_aside: dict[str, list[tuple[Queued, WaitReason]]] = defaultdict(list)

    def with_caps(self, caps: dict[CapKey, Cap]) -> _Pass:
        self.caps = caps
        self.cap_gpus = {key: cap.held_gpus for key, cap in caps.items()}
        return self

    def run(self) -> Decision:
        self._round(borrow=False)
        # Tenants stopped by their quota may now borrow what nobody's guaranteed
        # work waits for.
        for tenant, reason in list(self.blocked.items()):
            standing = self.tenants.get(tenant)
            if reason == "quota" and standing is not None and standing.borrow_gpus > 0:
                del self.blocked[tenant]
        self._round(borrow=True)
        waiting = _waiting(self.lines, self.blocked)
        for tenant, items in self.set_aside.items():
            after = len(self.lines.get(tenant) or ())
            for position, (item, reason) in enumerate(items, start=after + 1):
                waiting[item.key] = Waiting(position, reason, 0)
        return Decision(self.admit, waiting, self.borrowing, self.preempt)

    def _set_aside_at_caps(self, tenant: str) -> None:
        """Take the tenant's next workloads whose users or projects are at their caps
        out of its line, so that the next one in it is another user's or project's."""
        line = self.lines[tenant]
        while line and (full := self._full_cap(line[0])) is not None:
            self.set_aside[tenant].append((line.popleft(), full[1]))

    def _full_cap(self, item: Queued) -> CapKey | None:
        for key in item.caps():
            cap = self.caps.get(key)
            if cap is None:
                continue
            limit = cap.max_gpus + (cap.borrow_gpus if item.may_borrow else 0)
            if self.cap_gpus[key] + item.gpus > limit:
                return key
        return None

    def _share(self, tenant: str) -> tuple[float, int, str]:
        standing = self.tenants[tenant]
        dominant = max(
            (
                used / self.capacity[g]
                for g, used in self.held[tenant].items()
                if self.capacity.get(g)
            ),
            default=0.0,
        )
        return dominant / max(standing.weight, 1e-9), self.gpus[tenant], tenant

    def _round(self, *, borrow: bool) -> None:
        while True:
            for tenant in self.lines:
                if tenant not in self.blocked:
                    self._set_aside_at_caps(tenant)
            ready = [t for t, line in self.lines.items() if line and t not in self.blocked]
            for tenant in [t for t in ready if t not in self.tenants]:
                self.blocked[tenant] = "quota"
            ready = [t for t in ready if t in self.tenants]
            if not ready:
                return
            tenant = min(ready, key=self._share)
            head = self.lines[tenant][0]
            standing = self.tenants[tenant]
            limit = standing.max_gpus + (standing.borrow_gpus if borrow and head.may_borrow else 0)
            if (
                self.gpus[tenant] + head.gpus > limit
                or self.workloads[tenant] + 1 > standing.max_workloads
            ):
                self.blocked[tenant] = "quota"
                continue
            gpu_type = head.gpu_type
            if gpu_type in self.full_types or self.free.get(gpu_type, 0) < head.takes:
                reclaiming = not borrow and gpu_type not in self.full_types and self._reclaim(head)
                self.full_types.add(gpu_type)
                self.blocked[tenant] = "reclaim" if reclaiming else "capacity"
                continue
            if head.spread and not self._place_spread(head):
                self.full_types.add(gpu_type)
                self.blocked[tenant] = "capacity"
                continue
            self.lines[tenant].popleft()
            self.admit.append(head.key)
            if self.gpus[tenant] + head.gpus > standing.max_gpus:
                self.borrowing.add(head.key)
            self.free[gpu_type] -= head.takes
            self._hold(tenant, gpu_type, head.takes, head.gpus)
            self.workloads[tenant] += 1
            for key in head.caps():
                if key in self.caps:
                    self.cap_gpus[key] += head.gpus

    def _reclaim(self, head: Queued) -> bool:
        """Preempt borrowers' workloads of `head`'s type until it fits: whether its GPUs
        are (now) being freed for it. Preempts nothing if that could not be enough."""
        gpu_type = head.gpu_type
        short = head.takes - self.free.get(gpu_type, 0) - self.releasing.get(gpu_type, 0)
        if short <= 0:
            self.releasing[gpu_type] = -short  # earlier preemptions free enough
            return True
        gpus = dict(self.gpus)
        chosen: list[Running] = []
        for victim in self.victims:
            if short <= 0:
                break
            standing = self.tenants.get(victim.tenant_id)
            if (
                victim.gpu_type != gpu_type
                or standing is None
                or gpus[victim.tenant_id] <= standing.max_gpus  # not borrowing (any more)
            ):
                continue
            chosen.append(victim)
            gpus[victim.tenant_id] -= victim.gpus
            short -= victim.takes
        if short > 0:
            return False
        for victim in chosen:
            self.victims.remove(victim)
            self.preempt.append(victim.key)
            self._hold(victim.tenant_id, gpu_type, -victim.takes, -victim.gpus)
        self.releasing[gpu_type] = -short
        return True

    def _place_spread(self, head: Queued) -> bool:
        """Find `head.spread` nodes with one pod's units free each, tightest first so
        that roomy nodes stay whole, and take them; False, taking nothing, if too few."""
        per_pod = head.takes // head.spread
        nodes = self.node_free.get(head.gpu_type, {})
        fitting = sorted((free, node) for node, free in nodes.items() if free >= per_pod)
        if len(fitting) < head.spread:
            return False
        for _, node in fitting[: head.spread]:
            nodes[node] -= per_pod
        return True

    def _hold(self, tenant: str, gpu_type: str, units: int, gpus: int) -> None:
        self.held[tenant][gpu_type] = self.held[tenant].get(gpu_type, 0) + units
        self.gpus[tenant] += gpus


def _waiting(lines: dict[str, deque[Queued]], blocked: dict[str, WaitReason]) -> dict[str, Waiting]:
    waiting: dict[str, Waiting] = {}
    for tenant, line in lines.items():
        ahead_gpus = 0
        # The line is in priority order, so the first item's priority is the highest.
        top = line[0].priority if line else 0
        for position, item in enumerate(line, start=1):
            reason: WaitReason = (
                "priority" if item.priority < top else blocked.get(tenant, "capacity")
            )
            waiting[item.key] = Waiting(position, reason, ahead_gpus)
            ahead_gpus += item.gpus
    return waiting
