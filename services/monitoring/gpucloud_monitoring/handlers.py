"""Kafka handlers of the monitoring service: thin, they call the service."""

from __future__ import annotations

from gpucloud_libs.events import (
    CloudEvent,
    NodeInventory,
    NodeQuarantineRequested,
    NodeReleaseRequested,
    TelemetryBatch,
)

from .ingest import Ingest


class EventHandlers:
    def __init__(self, ingest: Ingest) -> None:
        self.ingest = ingest

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
