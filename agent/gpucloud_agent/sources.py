"""What the publish loop reads each round, whatever the GPUs are: NVML on a real node
(node_telemetry.py) or the simulated fleet (simulated_telemetry.py)."""

from __future__ import annotations

from typing import Protocol

from gpucloud_libs.events import NodeInventory, TelemetryBatch


class TelemetrySource(Protocol):
    async def nodes_added(self) -> list[str]:
        """Called first each round: the nodes new since the last call, whose inventory
        is due at once."""
        ...

    def nodes(self) -> list[str]:
        """Every node it reports for."""
        ...

    def inventory(self, node: str) -> NodeInventory:
        """The node's GPUs, as `node.inventory.v1` carries them."""
        ...

    async def batches(self) -> list[TelemetryBatch]:
        """One sample of every GPU, a batch per node."""
        ...
