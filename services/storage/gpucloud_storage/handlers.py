"""Kafka handlers of the storage service: thin, they call the capability that owns the event."""

from __future__ import annotations

from gpucloud_libs.events import CloudEvent, InstanceStateChanged, TenantDeleted, TenantUpserted

from .attachments import Attachments
from .tenancy import Tenancy

#: An instance in one of these holds no storage any more: what it was given is revoked.
RELEASED_IN = frozenset({"stopped", "failed", "deleted"})


class EventHandlers:
    def __init__(self, tenancy: Tenancy, attachments: Attachments) -> None:
        self.tenancy = tenancy
        self.attachments = attachments

    async def on_tenant(self, event: CloudEvent) -> None:
        if isinstance(event.data, TenantUpserted):
            await self.tenancy.apply(event.data)
        elif isinstance(event.data, TenantDeleted):
            await self.tenancy.delete(event.data.tenant_id)

    async def on_lifecycle(self, events: list[CloudEvent]) -> None:
        """A batch at a time: most instances use no storage, and one lookup per batch
        finds those that did."""
        ended = [
            (event.data.tenant_id, event.data.instance_id)
            for event in events
            if isinstance(event.data, InstanceStateChanged) and event.data.state in RELEASED_IN
        ]
        await self.attachments.release_ended(ended)
