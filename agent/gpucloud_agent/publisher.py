"""The one publish loop: every interval, a `telemetry.batch.v1` per node, and a
`node.inventory.v1` for each new node and for every node every ten minutes."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from faststream.kafka import KafkaBroker

from gpucloud_libs.events import NodeInventory, TelemetryBatch
from gpucloud_libs.kafka import publish_event
from gpucloud_libs.topics import TELEMETRY

from .seals import KeyUnavailable, Sealer
from .sources import TelemetrySource

log = logging.getLogger("gpucloud.agent")

SOURCE = "/gpucloud/agent"
INVENTORY_EVERY_S = 600.0


#: Publishes one report; False when it could not (no node key yet): tried again.
Send = Callable[[TelemetryBatch | NodeInventory], Awaitable[bool]]


def sealed_publisher(broker: KafkaBroker, sealer: Sealer) -> Send:
    """Publish each report under its node's seal; without the key, not at all."""

    async def publish(data: TelemetryBatch | NodeInventory) -> bool:
        try:
            sealed = await sealer(data)
        except KeyUnavailable as error:
            log.warning("not published, no node key: %s", error, extra={"node": data.node})
            return False
        await publish_event(broker, TELEMETRY, sealed, source=SOURCE)
        return True

    return publish


async def publish_forever(
    send: Send, source: TelemetrySource, interval_s: float, *, cluster: str | None = None
) -> None:
    """Send `source`'s telemetry every `interval_s` (`publish` to the broker), its
    inventories when due, saying the `cluster` its nodes are in; a slow round shortens
    the next wait rather than piling rounds up."""
    loop = asyncio.get_running_loop()
    inventory_due = 0.0
    unsent: list[str] = []  # inventories not published yet: sent again next round
    while True:
        started = loop.time()
        added = await source.nodes_added()
        if started >= inventory_due:
            added, inventory_due = source.nodes(), started + INVENTORY_EVERY_S
        if added:
            log.info("inventories", extra={"nodes": len(source.nodes()), "sent": len(added)})
        due = list(dict.fromkeys([*unsent, *added]))
        unsent = [
            node
            for node in due
            if not await send(source.inventory(node).model_copy(update={"cluster": cluster}))
        ]
        for batch in await source.batches():
            await send(batch)
        await asyncio.sleep(max(0.0, interval_s - (loop.time() - started)))
