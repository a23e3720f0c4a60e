"""Kafka handlers of the monitoring service: thin, they call the service."""

from __future__ import annotations

from gpucloud_libs.events import (
    CloudEvent,
    ClusterNodes,
    NodeInventory,
    NodeQuarantineRequested,
    NodeReleaseRequested,
    TelemetryBatch,
    TenantDeleted,
)

from .alert_rules import AlertRules
from .ingest import Ingest
from .other_clusters import OtherClusters
from .workload_projects import WorkloadProjects


class EventHandlers:
    def __init__(
        self,
        ingest: Ingest,
        rules: AlertRules,
        clusters: OtherClusters,
        projects: WorkloadProjects,
    ) -> None:
        self.ingest = ingest
        self.rules = rules
        self.clusters = clusters
        self.projects = projects

    async def on_clusters(self, event: CloudEvent) -> None:
        if isinstance(event.data, ClusterNodes):
            await self.clusters.said(event.data)

    async def on_tenant(self, event: CloudEvent) -> None:
        if isinstance(event.data, TenantDeleted):
            await self.rules.forget_tenant(event.data.tenant_id)
            await self.projects.forget_tenant(event.data.tenant_id)

    async def on_telemetry(self, events: list[CloudEvent]) -> None:
        """A batch of telemetry, inventory and operator requests on node health (applied
        after the batch's samples, in their order)."""
        batches = [e.data for e in events if isinstance(e.data, TelemetryBatch)]
        inventories = [e.data for e in events if isinstance(e.data, NodeInventory)]
        requests = [
            e.data
            for e in events
            if isinstance(e.data, NodeReleaseRequested | NodeQuarantineRequested)
        ]
        await self.ingest.ingest(batches, inventories, requests)
