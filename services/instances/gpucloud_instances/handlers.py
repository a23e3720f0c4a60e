"""Kafka handlers of the instances service: thin, they call the capability that owns the event."""

from __future__ import annotations

from gpucloud_libs.events import (
    AlertStateChanged,
    CloudEvent,
    NodeHealthChanged,
    ProjectBudgetReached,
    StopTenantInstancesRequested,
    TenantDeleted,
    TenantUpserted,
    UserAccessEnded,
    UserSpendLimitReached,
)

from .controller.nodes import NodeCordons
from .tenancy.kubeconfigs import UserKubeconfigs
from .tenancy.tenants import Tenancy


class EventHandlers:
    def __init__(
        self, tenancy: Tenancy, cordons: NodeCordons, kubeconfigs: UserKubeconfigs
    ) -> None:
        self.tenancy = tenancy
        self.cordons = cordons
        self.kubeconfigs = kubeconfigs

    async def on_tenant(self, event: CloudEvent) -> None:
        if isinstance(event.data, TenantUpserted):
            await self.tenancy.apply(event.data)
            await self.kubeconfigs.prune(event.data.tenant_id)
        elif isinstance(event.data, TenantDeleted):
            await self.tenancy.stop_workloads(event.data.tenant_id)
        elif isinstance(event.data, UserAccessEnded):
            await self.kubeconfigs.forget(event.data.tenant_id, event.data.user_id)

    async def on_command(self, event: CloudEvent) -> None:
        if isinstance(event.data, StopTenantInstancesRequested):
            await self.tenancy.stop_workloads(event.data.tenant_id)
        elif isinstance(event.data, UserSpendLimitReached):
            await self.tenancy.user_spend_reached(event.data)
        elif isinstance(event.data, ProjectBudgetReached):
            await self.tenancy.project_budget_reached(event.data)

    async def on_alert(self, event: CloudEvent) -> None:
        """Only stop-when-idle rules concern this service; other alerts are notices."""
        if isinstance(event.data, AlertStateChanged) and event.data.action == "stop_instance":
            await self.tenancy.stop_idle(event.data)

    async def on_node_health(self, event: CloudEvent) -> None:
        if isinstance(event.data, NodeHealthChanged):
            await self.cordons.set_health(event.data.node, event.data.health, event.data.cluster)
