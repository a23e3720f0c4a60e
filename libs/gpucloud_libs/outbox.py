"""The outbox: every service publishes an event only after the write it records.

A service writes the document first and publishes its event after (the write
is the truth, the event follows), then marks it published. Two document shapes
carry the pending event:

- a document that *is* one event (an audit entry, an alert, a usage record)
  holds `published: false` until the broker acknowledged it;
- a document that records many events over its life (an instance's
  transitions) holds them, encoded, in an `outbox` array written in the same
  single-document update as the change (`outbox_entry`), published in order
  (`publish_in_order`) and cleared after the acknowledgements.

When a publish fails, the document stays pending and is retried. Scanning a
growing collection for pending documents on every round would cost more each
day, so `PublishRetries` scans once after a start (a crash may have left
anything behind) and afterwards retries only the ids whose publish failed in
this process.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypedDict, TypeVar

from faststream.kafka import KafkaBroker

from .events import CloudEvent
from .topics import TopicSpec

PendingT = TypeVar("PendingT", bound=Mapping[str, Any])


class PublishRetries:
    def __init__(self) -> None:
        #: Ids whose publish failed, to try again; taken whole by each sweep, so a
        #: failure recorded while a sweep runs waits for the next one.
        self._failed: set[str] = set()
        self._scanned = False  # the scan after the start: made once it succeeds

    def failed(self, document_id: str) -> None:
        self._failed.add(document_id)

    async def sweep(
        self,
        *,
        all_unpublished: Callable[[], Awaitable[Sequence[PendingT]]],
        get: Callable[[str], Awaitable[PendingT | None]],
        publish: Callable[[PendingT], Awaitable[None]],
    ) -> None:
        """Publish what is pending: at the first sweep whatever a scan finds (a crash
        may have left anything behind), then the ids that failed since. Whatever this
        sweep could not reach or publish is kept for the next one."""
        taken, self._failed = self._failed, set()
        try:
            if not self._scanned:
                pending = list(await all_unpublished())
                self._scanned = True
            else:
                found = [await get(document_id) for document_id in sorted(taken)]
                pending = [doc for doc in found if doc is not None and not doc.get("published")]
        except BaseException:
            self._failed |= taken
            raise
        for index, doc in enumerate(pending):
            try:
                await publish(doc)
            except BaseException:
                self._failed |= {later["_id"] for later in pending[index:]}
                raise


class OutboxEntry(TypedDict):
    """One event as it goes to Kafka, stored in the document whose write it records."""

    id: str
    key: str
    value: str
    headers: dict[str, str]


def outbox_entry(event: CloudEvent) -> OutboxEntry:
    key, value, headers = event.to_kafka()
    return {"id": event.id, "key": key.decode(), "value": value.decode(), "headers": headers}


async def publish_in_order(
    broker: KafkaBroker, topic: TopicSpec, entries: list[OutboxEntry]
) -> None:
    """Publish `entries` in their order; returns once the broker acknowledged every one.

    Sent back to back on one producer (and one partition, since they share the
    key), so they keep their order; then every acknowledgement is awaited at once.
    """
    acks = [
        await broker.publish(
            entry["value"].encode(),
            topic.name,
            key=entry["key"].encode(),
            headers=dict(entry["headers"]),  # the publisher adds trace headers in place
            no_confirm=True,
        )
        for entry in entries
    ]
    await asyncio.gather(*acks)
