"""Kafka handlers of the metering service: thin, they record facts through the fact recorder.

Each handler returns only once its fact is written; the offset is committed
after that (libs/kafka.py), so a crash replays the event and the replay is a
duplicate key, not a second count. Events of a type that does not belong on a
topic never reach a handler: the consumer dead-letters them (libs/kafka.py).
"""

from __future__ import annotations

from gpucloud_libs.events import (
    CloudEvent,
    InstanceStateChanged,
    JobRunStateChanged,
    NodeHealthChanged,
    ReplicaStateChanged,
    StorageUsageSampled,
    TenantDeleted,
    TenantUpserted,
)

from .budgets import Budgets
from .facts import FactRecorder


class EventHandlers:
    def __init__(self, facts: FactRecorder, budgets: Budgets) -> None:
        self.facts = facts
        self.budgets = budgets

    async def on_lifecycle(self, events: list[CloudEvent]) -> None:
        """A batch: one bulk insert."""
        transitions = [(e.id, e.data) for e in events if isinstance(e.data, InstanceStateChanged)]
        await self.facts.transitions(list(transitions))

    async def on_job_lifecycle(self, events: list[CloudEvent]) -> None:
        """A batch of job events: the runs' transitions are billed (the jobs' own
        transitions hold no GPUs)."""
        runs = [(e.id, e.data) for e in events if isinstance(e.data, JobRunStateChanged)]
        await self.facts.transitions(list(runs))

    async def on_inference_lifecycle(self, events: list[CloudEvent]) -> None:
        """A batch of inference services' replica transitions, billed as runs are."""
        replicas = [(e.id, e.data) for e in events if isinstance(e.data, ReplicaStateChanged)]
        await self.facts.transitions(list(replicas))

    async def on_storage_usage(self, event: CloudEvent) -> None:
        if isinstance(event.data, StorageUsageSampled):
            await self.facts.sample(event.data)

    async def on_node_health(self, event: CloudEvent) -> None:
        if isinstance(event.data, NodeHealthChanged):
            await self.facts.health(event.data)

    async def on_tenant(self, event: CloudEvent) -> None:
        if isinstance(event.data, TenantUpserted | TenantDeleted):
            await self.budgets.apply_tenant(event.data)
