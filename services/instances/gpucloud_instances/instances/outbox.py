"""An instance's recorded events, published and then dropped from its outbox.

A start's transitions follow each other within tens of milliseconds, and a clear
after each was a write of its own: published events are dropped with the next
transition's write, or `OUTBOX_CLEAR_DELAY_S` later when none comes. A crash
between publish and drop republishes the same event ids, which consumers dedupe;
an event is never dropped before the broker acknowledged it."""

from __future__ import annotations

import asyncio
import logging

from faststream.kafka import KafkaBroker

from gpucloud_libs.outbox import publish_in_order
from gpucloud_libs.topics import INSTANCE_LIFECYCLE

from ..documents import InstanceDoc
from .store import InstanceStore

log = logging.getLogger(__name__)

OUTBOX_CLEAR_DELAY_S = 1.0


class InstanceOutbox:
    def __init__(self, broker: KafkaBroker, instances: InstanceStore) -> None:
        self._broker = broker
        self._instances = instances
        #: Instances whose outbox this leader published up to a sequence, and whose
        #: clear is still to come; the tasks that clear them.
        self._published: dict[str, int] = {}
        self._clearing: set[asyncio.Task[None]] = set()

    def published(self, doc: InstanceDoc) -> bool:
        """Whether `doc`'s outbox is published: the next write may drop it."""
        return self._published.get(doc["_id"]) == doc["sequence"]

    async def publish(self, doc: InstanceDoc) -> None:
        """Publish `doc`'s outbox in order (once per sequence), and drop it later."""
        if not doc.get("outbox") or self.published(doc):
            return
        key, sequence = doc["_id"], doc["sequence"]
        await publish_in_order(self._broker, INSTANCE_LIFECYCLE, doc["outbox"])
        self._published[key] = sequence
        task = asyncio.create_task(self._clear_later(key, sequence))
        self._clearing.add(task)
        task.add_done_callback(self._clearing.discard)

    def reset(self) -> None:
        """Leadership ended: the next leader publishes what is left, deduped."""
        self._published.clear()
        for task in self._clearing:
            task.cancel()

    async def _clear_later(self, key: str, sequence: int) -> None:
        await asyncio.sleep(OUTBOX_CLEAR_DELAY_S)
        if self._published.get(key) != sequence:
            return  # a later transition replaced them
        try:
            await self._instances.clear_outbox(key, sequence)
        except Exception as error:  # the next leader publishes them again, deduped
            log.warning("clearing a published outbox failed", extra={"instance": key,
                                                                      "error": str(error)})  # fmt: skip
            return
        if self._published.get(key) == sequence:
            del self._published[key]
