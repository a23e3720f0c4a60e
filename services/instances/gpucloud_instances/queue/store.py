"""Each tenant's published line in the admission queue."""

from __future__ import annotations

import asyncio

from gpucloud_libs.mongo import Collection, Database, typed

from ..store import QUEUE_BANDS, QUEUE_LINES
from .documents import QueueBandsDoc, QueueLineDoc


class QueueLineStore:
    """Each tenant's line in the admission queue as the last pass left it, read by `_id`.

    The pass (on the leader) is the only writer. A submission reads the tenant's
    priority bands, a few numbers, for the place it returns; a read of one queued
    workload reads the line. Before these, each read queried the tenant's queued
    jobs, and FerretDB decoded every one of them: at 10,000 queued, every submission
    paid for the whole line.
    """

    def __init__(self, db: Database) -> None:
        self._lines: Collection[QueueLineDoc] = typed(db, QUEUE_LINES, QueueLineDoc)
        self._bands: Collection[QueueBandsDoc] = typed(db, QUEUE_BANDS, QueueBandsDoc)

    async def publish(self, line: QueueLineDoc, bands: list[list[int]]) -> None:
        """The tenant's line, and its bands (`Line.bands`: [priority, workloads, GPUs])."""
        summed = QueueBandsDoc(
            _id=line["_id"], priorities=[band[0] for band in bands],
            workloads=[band[1] for band in bands], gpus=[band[2] for band in bands],
        )  # fmt: skip
        await asyncio.gather(
            self._lines.replace_one({"_id": line["_id"]}, line, upsert=True),
            self._bands.replace_one({"_id": line["_id"]}, summed, upsert=True),
        )

    async def line(self, tenant_id: str) -> QueueLineDoc | None:
        return await self._lines.find_one({"_id": tenant_id})

    async def bands(self, tenant_id: str) -> list[list[int]]:
        """The tenant's bands as published ([priority, workloads, GPUs]); none if none."""
        doc = await self._bands.find_one({"_id": tenant_id})
        if doc is None or "priorities" not in doc:  # none yet, or of the nested form
            return []
        return [
            list(band)
            for band in zip(doc["priorities"], doc["workloads"], doc["gpus"], strict=True)
        ]

    async def tenants(self) -> list[str]:
        """The tenants with a published line (read once per leadership)."""
        return [doc["_id"] async for doc in self._lines.find({}, {"_id": 1})]
