"""A tenant's line in the admission queue: its queued jobs and instances, in the order
the pass takes them (priority, then age), and where one of them stands in it."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from gpucloud_libs.clock import aware
from gpucloud_libs.gpu_shares import GpuShare

from .schemas import QueuePosition
from .store import InstanceStore, JobStore
from .wakeups import job_item


@dataclass(frozen=True)
class Waiter:
    """One queued workload, named by its controller work item (an instance's key, or
    `job_item` of a job's), which is also its key in the admission pass."""

    item: str
    priority: int
    created_at: datetime
    gpus: int


#: A tenant's queued workloads, in admission order.
Line = list[Waiter]


class QueueLines:
    def __init__(self, jobs: JobStore, instances: InstanceStore) -> None:
        self._jobs = jobs
        self._instances = instances

    async def line(self, tenant_id: str) -> Line:
        jobs, instances = await asyncio.gather(
            self._jobs.queued(tenant_id), self._instances.queued(tenant_id)
        )
        waiters = [
            Waiter(job_item(doc["_id"]), doc["priority"], aware(doc["created_at"]),
                   GpuShare.of(doc).quota_gpus(doc["gpu_count"] * doc["parallelism"]))
            for doc in jobs
        ] + [
            Waiter(doc["_id"], doc.get("priority", 0), aware(doc["created_at"]),
                   GpuShare.of(doc).quota_gpus(doc["gpu_count"]))
            for doc in instances
        ]  # fmt: skip
        return sorted(waiters, key=lambda w: (-w.priority, w.created_at, w.item))

    async def position(
        self, tenant_id: str, item: str, reason: str | None, lines: dict[str, Line]
    ) -> QueuePosition:
        """Where a queued workload stands; `lines` keeps each tenant's line read once
        for all the items of one page."""
        if tenant_id not in lines:
            lines[tenant_id] = await self.line(tenant_id)
        return queue_position(item, reason, lines[tenant_id])


def queue_position(item: str, reason: str | None, line: Sequence[Waiter]) -> QueuePosition:
    """Where `item` stands in its tenant's `line`, and why it waits."""
    ahead = []
    for waiter in line:
        if waiter.item == item:
            break
        ahead.append(waiter)
    return QueuePosition(
        position=len(ahead) + 1,
        # Until the admission queue's first pass over it, it waits for that pass.
        reason=reason or "admission",
        gpus_ahead=sum(waiter.gpus for waiter in ahead),
    )
