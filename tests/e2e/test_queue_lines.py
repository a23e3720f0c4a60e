"""Each tenant's published line in the admission queue, on the real MongoDB-wire store
(FerretDB): what a new submission's place is read from."""

from __future__ import annotations

from typing import Any

from pymongo import AsyncMongoClient

from gpucloud_instances.queue.documents import QueueLineDoc
from gpucloud_instances.queue.line import Line
from gpucloud_instances.queue.store import QueueLineStore

from .support import unique


async def test_a_tenants_priority_bands_are_stored_and_read_back(
    mongo: AsyncMongoClient[dict[str, Any]],
) -> None:
    """Bands are [priority, workloads, GPUs], highest priority first: stored as parallel
    lists, since FerretDB refuses an array of arrays (which lost every publish)."""
    store = QueueLineStore(mongo[unique("queue")])
    line = Line(["j-1", "j-2", "j-3"], [2, 1, 4], [5, 0, 5])
    doc = QueueLineDoc(_id="acme", items=line.items, gpus=line.gpus, priorities=line.priorities)
    await store.publish(doc, line.bands)
    assert await store.bands("acme") == line.bands == [[5, 2, 6], [0, 1, 1]]
    assert await store.bands("nobody") == []
    stored = await store.line("acme")
    assert stored is not None
    assert stored["items"] == ["j-1", "j-2", "j-3"]
