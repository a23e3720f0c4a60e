"""Kafka handlers of the instances service: thin, they call the service or controller."""

from __future__ import annotations

from gpucloud_libs.events import (
    CloudEvent,
    NodeHealthChanged,
    StopTenantInstancesRequested,
    TenantDeleted,
    TenantUpserted,
)

from .controller import Controller
from .service import InstancesService


class EventHandlers:
    def __init__(self, service: InstancesService, controller: Controller) -> None:
        self.service = service
        self.controller = controller

    async def on_tenant(self, event: CloudEvent) -> None:
        if isinstance(event.data, TenantUpserted):
            await self.service.apply_tenant(event.data)
        elif isinstance(event.data, TenantDeleted):
            await self.service.stop_tenant_instances(event.data.tenant_id)

    async def on_command(self, event: CloudEvent) -> None:
        if isinstance(event.data, StopTenantInstancesRequested):
            await self.service.stop_tenant_instances(event.data.tenant_id)

    async def on_node_health(self, event: CloudEvent) -> None:
        if isinstance(event.data, NodeHealthChanged):
            await self.controller.set_node_health(event.data.node, event.data.health)
