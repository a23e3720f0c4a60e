"""Storage usage: bytes stored per storage, sampled and published for metering."""

from __future__ import annotations

from datetime import datetime

from faststream.kafka import KafkaBroker

from gpucloud_libs.clock import now
from gpucloud_libs.events import StorageUsageSampled
from gpucloud_libs.kafka import publish_event
from gpucloud_libs.topics import STORAGE_USAGE

from .backend import ObjectBackend
from .documents import StorageDoc
from .store import StorageStore

SOURCE = "/gpucloud/storage"


class UsagePublisher:
    def __init__(self, backend: ObjectBackend, broker: KafkaBroker, storages: StorageStore) -> None:
        self._backend = backend
        self._broker = broker
        self._storages = storages

    async def sample(self) -> int:
        """Publish bytes stored per ready storage; returns how many were sampled."""
        by_bucket = await self._backend.bucket_usage()
        at = now()
        sampled = 0
        for doc in await self._storages.in_state("ready"):
            used = by_bucket.get(doc["bucket"], 0) if doc["kind"] == "object" else doc["size_bytes"]
            await self.publish(doc, used, at)
            if doc["kind"] == "object":
                await self._storages.record_usage(doc["_id"], used, at)
            sampled += 1
        return sampled

    async def publish(self, doc: StorageDoc, used: int, at: datetime) -> None:
        await publish_event(
            self._broker, STORAGE_USAGE,
            StorageUsageSampled(
                storage_id=doc["storage_id"], tenant_id=doc["tenant_id"], kind=doc["kind"],
                bytes_used=used, at=at,
            ),
            source=SOURCE,
        )  # fmt: skip
