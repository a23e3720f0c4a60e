"""Kafka handlers of the metering service: thin, they record facts through the service.

Each handler returns only once its fact is written; the offset is committed
after that (libs/kafka.py), so a crash replays the event and the replay is a
duplicate key, not a second count.
"""

from __future__ import annotations

from gpucloud_libs.events import (
    CloudEvent,
    InstanceStateChanged,
    NodeHealthChanged,
    StorageUsageSampled,
    TenantDeleted,
    TenantUpserted,
)
from gpucloud_libs.kafka import PermanentEventError

from .service import MeteringService


class EventHandlers:
    def __init__(self, service: MeteringService) -> None:
        self.service = service

    async def on_lifecycle(self, events: list[CloudEvent]) -> list[tuple[CloudEvent, str]]:
        """A batch: one bulk insert. Returns the events that do not belong here."""
        transitions = [(e.id, e.data) for e in events if isinstance(e.data, InstanceStateChanged)]
        await self.service.record_transitions(transitions)
        return [
            (event, f"{event.type} does not belong on the lifecycle topic")
            for event in events
            if not isinstance(event.data, InstanceStateChanged)
        ]

    async def on_storage_usage(self, event: CloudEvent) -> None:
        if not isinstance(event.data, StorageUsageSampled):
            raise PermanentEventError(f"{event.type} does not belong on the storage usage topic")
        await self.service.record_sample(event.data)

    async def on_node_health(self, event: CloudEvent) -> None:
        if not isinstance(event.data, NodeHealthChanged):
            raise PermanentEventError(f"{event.type} does not belong on the node health topic")
        await self.service.record_health(event.data)

    async def on_tenant(self, event: CloudEvent) -> None:
        if isinstance(event.data, TenantUpserted | TenantDeleted):
            await self.service.apply_tenant(event.data)
