"""Kafka handlers of the storage service: thin, they call the service."""

from __future__ import annotations

from gpucloud_libs.events import CloudEvent, InstanceStateChanged, TenantDeleted, TenantUpserted

from .service import StorageService

#: An instance in one of these holds no storage any more: what it was given is revoked.
RELEASED_IN = frozenset({"stopped", "failed", "deleted"})


class EventHandlers:
    def __init__(self, service: StorageService) -> None:
        self.service = service

    async def on_tenant(self, event: CloudEvent) -> None:
        if isinstance(event.data, TenantUpserted):
            await self.service.apply_tenant(event.data)
        elif isinstance(event.data, TenantDeleted):
            await self.service.delete_tenant(event.data.tenant_id)

    async def on_lifecycle(self, events: list[CloudEvent]) -> None:
        """A batch at a time: most instances use no storage, and one lookup per batch
        finds those that did."""
        ended = [
            (event.data.tenant_id, event.data.instance_id)
            for event in events
            if isinstance(event.data, InstanceStateChanged) and event.data.state in RELEASED_IN
        ]
        await self.service.release_ended(ended)
