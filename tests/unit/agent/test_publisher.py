"""The agent's one publish loop, over any telemetry source: inventories first and when
a node is new, then a batch per node each round."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime

from gpucloud_agent.publisher import publish_forever
from gpucloud_libs.events import GpuSample, NodeInventory, TelemetryBatch

AT = datetime(2026, 11, 27, tzinfo=UTC)
SAMPLE = GpuSample(
    gpu_uuid="GPU-0", index=0, at=AT, utilization_gpu_pct=0, utilization_memory_pct=0,
    memory_used_mib=0, memory_total_mib=81559, temperature_c=40, power_w=70,
)  # fmt: skip


class GrowingSource:
    """Two nodes, and a third from the third round on."""

    def __init__(self) -> None:
        self.rounds = 0
        self._nodes = ["n1", "n2"]

    async def nodes_added(self) -> list[str]:
        self.rounds += 1
        if self.rounds == 3:
            self._nodes.append("n3")
            return ["n3"]
        return []

    def nodes(self) -> list[str]:
        return list(self._nodes)

    def inventory(self, node: str) -> NodeInventory:
        return NodeInventory(node=node, source="simulated", at=AT)

    async def batches(self) -> list[TelemetryBatch]:
        return [
            TelemetryBatch(node=node, source="simulated", samples=(SAMPLE,)) for node in self._nodes
        ]


async def test_inventories_come_first_and_for_each_new_node_then_a_batch_per_node() -> None:
    source, sent = GrowingSource(), []

    async def send(data: TelemetryBatch | NodeInventory) -> bool:
        sent.append((type(data).__name__, data.node))
        if source.rounds == 4:
            raise asyncio.CancelledError  # four rounds are enough
        return True

    with contextlib.suppress(asyncio.CancelledError):
        await publish_forever(send, source, interval_s=0.001)
    assert sent == [
        ("NodeInventory", "n1"), ("NodeInventory", "n2"),
        ("TelemetryBatch", "n1"), ("TelemetryBatch", "n2"),
        ("TelemetryBatch", "n1"), ("TelemetryBatch", "n2"),
        ("NodeInventory", "n3"),
        ("TelemetryBatch", "n1"), ("TelemetryBatch", "n2"), ("TelemetryBatch", "n3"),
        ("TelemetryBatch", "n1"),
    ]  # fmt: skip


async def test_an_inventory_that_could_not_go_out_goes_in_the_next_round() -> None:
    """No node key yet at the first round (monitoring starting): the inventory is sent
    as soon as it can be, not ten minutes later."""
    source, sent = GrowingSource(), []

    async def send(data: TelemetryBatch | NodeInventory) -> bool:
        if source.rounds == 3:
            raise asyncio.CancelledError
        if source.rounds == 1:
            return False  # no key yet: nothing goes out
        sent.append((type(data).__name__, data.node))
        return True

    with contextlib.suppress(asyncio.CancelledError):
        await publish_forever(send, source, interval_s=0.001)
    assert sent == [
        ("NodeInventory", "n1"), ("NodeInventory", "n2"),
        ("TelemetryBatch", "n1"), ("TelemetryBatch", "n2"),
    ]  # fmt: skip


async def test_each_inventory_says_the_cluster_the_agent_was_told_its_nodes_are_in() -> None:
    source, inventories = GrowingSource(), []

    async def send(data: TelemetryBatch | NodeInventory) -> bool:
        if source.rounds == 2:
            raise asyncio.CancelledError
        if isinstance(data, NodeInventory):
            inventories.append((data.node, data.cluster))
        return True

    with contextlib.suppress(asyncio.CancelledError):
        await publish_forever(send, source, interval_s=0.001, cluster="local-2")
    assert inventories == [("n1", "local-2"), ("n2", "local-2")]
