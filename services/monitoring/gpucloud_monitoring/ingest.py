"""Telemetry ingestion: a batch at a time, into minute and hour roll-ups, the rule engine
and the health machine; and the inventory of each node's GPUs, classified into tiers.

Ingestion is a batch at a time (libs: `subscribe_event_batches`); the offsets
are committed after the batch's writes, so a crash replays it. Replays are
harmless: roll-up windows, alerts and deliveries have deterministic ids.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from datetime import timedelta

from gpucloud_libs.clock import now
from gpucloud_libs.events import (
    NodeHealthRequest,
    NodeInventory,
    NodeReleaseRequested,
    TelemetryBatch,
)

from .alerts import Alerts
from .documents import GpuStatus, RollupDoc
from .health import HealthTracker
from .node_health import NodeHealth
from .provenance import Provenance, Reports
from .rollup import Rollup
from .rules import RuleEngine
from .settings import MonitoringSettings
from .store import HOURS, MINUTES, MonitoringStore
from .tiers import Capability, classify

log = logging.getLogger(__name__)


class Ingest:
    def __init__(
        self,
        settings: MonitoringSettings,
        store: MonitoringStore,
        engine: RuleEngine,
        tracker: HealthTracker,
        alerts: Alerts,
        node_health: NodeHealth,
        provenance: Provenance,
    ) -> None:
        self._provenance = provenance
        self._settings = settings
        self._store = store
        self._engine = engine
        self._tracker = tracker
        self._alerts = alerts
        self._node_health = node_health
        self._minutes = Rollup(60)
        self._hours = Rollup(3600)

    async def ingest(
        self,
        batches: list[TelemetryBatch],
        inventories: list[NodeInventory],
        requests: list[NodeHealthRequest] | None = None,
    ) -> None:
        taken = await self._provenance.taken(Reports(batches, inventories, requests or []))
        minute_docs: list[RollupDoc] = []
        hour_docs: list[RollupDoc] = []
        for batch in taken.batches:
            for sample in batch.samples:
                minute_docs += self._minutes.add(batch.node, sample)
                hour_docs += self._hours.add(batch.node, sample)
            for transition in self._engine.observe(batch.node, list(batch.samples)):
                await self._alerts.observe(transition)
            latest = max(sample.at for sample in batch.samples)
            change = self._tracker.observe(batch.node, list(batch.samples), latest)
            if change is not None:
                await self._node_health.changed(change)
        await self._write_rollups(minute_docs, hour_docs)
        for inventory in taken.inventories:
            await self._inventory(inventory)
        for request in taken.requests:
            change = (
                self._tracker.release(request.node, request.at)
                if isinstance(request, NodeReleaseRequested)
                else self._tracker.quarantine(request.node, request.reason, request.at)
            )
            if change is not None:
                await self._node_health.changed(change)

    async def flush_quiet(self) -> None:
        """Write the windows of GPUs that stopped reporting."""
        at = now()
        await self._write_rollups(self._minutes.flush_before(at), self._hours.flush_before(at))

    async def _write_rollups(
        self, minute_docs: list[RollupDoc], hour_docs: list[RollupDoc]
    ) -> None:
        await self._store.insert_rollups(MINUTES, minute_docs)
        await self._store.insert_rollups(HOURS, hour_docs)
        by_node: dict[str, list[RollupDoc]] = defaultdict(list)
        for doc in minute_docs:
            by_node[doc["node"]].append(doc)
        for node, docs in by_node.items():
            newest = max(doc["start"] for doc in docs)
            gpus: dict[str, GpuStatus] = {
                doc["gpu_uuid"]: {
                    "tenant_id": doc["tenant_id"],
                    "instance_id": doc["instance_id"],
                    "parent_gpu_uuid": doc.get("parent_gpu_uuid"),
                    "utilization_gpu_pct_avg": doc["utilization_gpu_pct_avg"],
                    "memory_used_mib_avg": doc["memory_used_mib_avg"],
                    "memory_total_mib": doc["memory_total_mib"],
                    "temperature_c_avg": doc["temperature_c_avg"],
                    "power_w_avg": doc["power_w_avg"],
                }
                for doc in docs
                if doc["start"] == newest
            }
            await self._store.put_node_status(node, {"minute": newest, "gpus": gpus})

    async def _inventory(self, inventory: NodeInventory) -> None:
        gpus = []
        for gpu in inventory.gpus:
            tier = classify(
                Capability(
                    model=gpu.name, memory_total_mib=gpu.memory_total_mib,
                    pcie_gen_current=gpu.pcie_gen_current, pcie_gen_max=gpu.pcie_gen_max,
                    pcie_width_current=gpu.pcie_width_current, pcie_width_max=gpu.pcie_width_max,
                )
            )  # fmt: skip
            gpus.append({**gpu.model_dump(), "tier": tier.tier, "tier_reasons": list(tier.reasons)})
        await self._store.put_inventory(
            inventory.node,
            {
                "source": inventory.source,
                "gpus": gpus,
                "unavailable_reason": inventory.unavailable_reason,
                "at": inventory.at,
                "cluster": inventory.cluster,
                "zone": inventory.zone,
            },
        )

    async def retention(self) -> None:
        at = now()
        await self._store.drop_older(
            MINUTES, at - timedelta(hours=self._settings.minute_retention_h)
        )
        await self._store.drop_older(HOURS, at - timedelta(days=self._settings.hour_retention_days))
