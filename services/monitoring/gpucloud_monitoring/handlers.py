"""Kafka handlers of the monitoring service: thin, they call the service."""

from __future__ import annotations

from gpucloud_libs.events import CloudEvent, NodeInventory, NodeReleaseRequested, TelemetryBatch

from .service import MonitoringService


class EventHandlers:
    def __init__(self, service: MonitoringService) -> None:
        self.service = service

    async def on_telemetry(self, events: list[CloudEvent]) -> list[tuple[CloudEvent, str]]:
        """A batch of telemetry and inventory events; anything else is refused."""
        batches = [e.data for e in events if isinstance(e.data, TelemetryBatch)]
        inventories = [e.data for e in events if isinstance(e.data, NodeInventory)]
        releases = [e.data for e in events if isinstance(e.data, NodeReleaseRequested)]
        await self.service.ingest(batches, inventories, releases)
        return [
            (event, f"{event.type} does not belong on the telemetry topic")
            for event in events
            if not isinstance(event.data, TelemetryBatch | NodeInventory | NodeReleaseRequested)
        ]
