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
- It must fit the free GPUs of its type; if not, it waits for `capacity`, and
  so does every later workload of that GPU type this pass, whoever's: a big
  job is not starved by smaller ones slipping past it.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

WaitReason = Literal["quota", "capacity", "priority"]


@dataclass(frozen=True)
class Queued:
    """A workload waiting for admission."""

    key: str
    tenant_id: str
    gpu_type: str
    #: GPUs it holds once admitted (all of its pods).
    gpus: int
    priority: int
    created_at: datetime


@dataclass(frozen=True)
class TenantShare:
    """A tenant's standing: its quota (guaranteed share), what it holds, its weight."""

    max_gpus: int
    max_workloads: int
    held_gpus: int
    held_workloads: int
    #: Held GPUs by type, for the dominant share.
    held_by_type: dict[str, int] = field(default_factory=dict)
    weight: float = 1.0


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


def tenant_order(queued: list[Queued]) -> list[Queued]:
    """One tenant's queue: priority, then age, then key."""
    return sorted(queued, key=lambda q: (-q.priority, q.created_at, q.key))


def decide(
    queued: list[Queued],
    tenants: dict[str, TenantShare],
    free: dict[str, int],
    capacity: dict[str, int],
) -> Decision:
    """Admit what fits now, fairly; say why the rest waits.

    `free`: GPUs free per type right now; `capacity`: GPUs per type in the fleet
    (the denominator of the dominant share). A workload of a tenant missing from
    `tenants` (not known yet, or suspended) waits for `quota`.
    """
    by_tenant: dict[str, list[Queued]] = defaultdict(list)
    for item in queued:
        by_tenant[item.tenant_id].append(item)
    lines = {tenant: tenant_order(items) for tenant, items in by_tenant.items()}
    held = {t: dict(s.held_by_type) for t, s in tenants.items()}
    gpus = {t: s.held_gpus for t, s in tenants.items()}
    workloads = {t: s.held_workloads for t, s in tenants.items()}
    free = dict(free)
    blocked: dict[str, WaitReason] = {}  # tenant -> why its next one waits
    full_types: set[str] = set()
    admit: list[str] = []

    def share(tenant: str) -> tuple[float, int, str]:
        standing = tenants[tenant]
        dominant = max(
            (used / capacity[g] for g, used in held[tenant].items() if capacity.get(g)),
            default=0.0,
        )
        return dominant / max(standing.weight, 1e-9), gpus[tenant], tenant

    while True:
        ready = [t for t, line in lines.items() if line and t not in blocked]
        if not ready:
            break
        unknown = [t for t in ready if t not in tenants]
        for tenant in unknown:
            blocked[tenant] = "quota"
        ready = [t for t in ready if t in tenants]
        if not ready:
            break
        tenant = min(ready, key=share)
        head = lines[tenant][0]
        standing = tenants[tenant]
        if (
            gpus[tenant] + head.gpus > standing.max_gpus
            or workloads[tenant] + 1 > standing.max_workloads
        ):
            blocked[tenant] = "quota"
            continue
        if head.gpu_type in full_types or free.get(head.gpu_type, 0) < head.gpus:
            full_types.add(head.gpu_type)
            blocked[tenant] = "capacity"
            continue
        lines[tenant].pop(0)
        admit.append(head.key)
        free[head.gpu_type] -= head.gpus
        held[tenant][head.gpu_type] = held[tenant].get(head.gpu_type, 0) + head.gpus
        gpus[tenant] += head.gpus
        workloads[tenant] += 1
    return Decision(admit, _waiting(lines, blocked))


def _waiting(lines: dict[str, list[Queued]], blocked: dict[str, WaitReason]) -> dict[str, Waiting]:
    waiting: dict[str, Waiting] = {}
    for tenant, line in lines.items():
        ahead_gpus = 0
        for position, item in enumerate(line, start=1):
            outranked = any(other.priority > item.priority for other in line[: position - 1])
            reason: WaitReason = "priority" if outranked else blocked.get(tenant, "capacity")
            waiting[item.key] = Waiting(position, reason, ahead_gpus)
            ahead_gpus += item.gpus
    return waiting
