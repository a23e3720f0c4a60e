"""Kafka through FastStream: the broker factory, event publishing and safe consumers.

Defaults are stronger than aiokafka's: producers are idempotent with acks=all,
and consumers commit an offset only after the handler's work is durable. A
message that can never be processed is parked on the consumer's dead-letter
topic and consumption goes on; a transient failure rewinds and retries.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from faststream import AckPolicy
from faststream.kafka import KafkaBroker, KafkaMessage
from faststream.kafka.opentelemetry import KafkaTelemetryMiddleware
from opentelemetry.trace import TracerProvider

from .events import CloudEvent, EventData, MalformedEvent
from .kafka_connection import KafkaConnection
from .topics import TopicSpec, dead_letter_topic

log = logging.getLogger(__name__)

EventHandler = Callable[[CloudEvent], Awaitable[None]]

#: How long a consumer waits before retrying a message whose handler failed transiently.
RETRY_BACKOFF_S = 1.0
#: Every consumer: from the start of a new group, committed reads only, and offsets
#: committed by our code once the work is durable, never by a timer.
CONSUMER_OPTIONS: dict[str, Any] = {
    "auto_offset_reset": "earliest",
    "isolation_level": "read_committed",
    "ack_policy": AckPolicy.MANUAL,
}


class PermanentEventError(Exception):
    """The handler can never process this event (not a transient failure): dead-letter it."""


def create_broker(
    kafka: KafkaConnection, *, client_id: str, tracer_provider: TracerProvider | None = None
) -> KafkaBroker:
    return KafkaBroker(
        kafka.bootstrap,
        security=kafka.security(),
        client_id=client_id,
        acks="all",
        enable_idempotence=True,
        allow_auto_create_topics=False,
        middlewares=[KafkaTelemetryMiddleware(tracer_provider=tracer_provider)],
        logger=logging.getLogger(f"gpucloud.kafka.{client_id}"),
        log_level=logging.DEBUG,
    )


async def publish_event(
    broker: KafkaBroker,
    topic: TopicSpec,
    data: EventData,
    *,
    source: str,
    event_id: str | None = None,
) -> CloudEvent:
    """Publish one event; returns once the broker has acknowledged it (acks=all)."""
    event = CloudEvent.new(data, source=source, event_id=event_id)
    await publish_cloud_event(broker, topic, event)
    return event


async def publish_cloud_event(broker: KafkaBroker, topic: TopicSpec, event: CloudEvent) -> None:
    key, value, headers = event.to_kafka()
    await broker.publish(value, topic.name, key=key, headers=headers)


def _record_headers(record: Any) -> dict[str, str]:
    return {key: value.decode() for key, value in record.headers or () if isinstance(value, bytes)}


async def _dead_letter(broker: KafkaBroker, record: Any, dlq: TopicSpec, reason: str) -> None:
    """Park a record, as it came, on `dlq`, with where it came from and why."""
    parked = {
        **_record_headers(record),
        "x-dlq-reason": reason[:2000],
        "x-dlq-topic": record.topic,
        "x-dlq-partition": str(record.partition),
        "x-dlq-offset": str(record.offset),
    }
    await broker.publish(record.value, dlq.name, key=record.key, headers=parked)
    log.warning(
        "dead-lettered message",
        extra={
            "topic": record.topic,
            "offset": record.offset,
            "dlq": dlq.name,
            "reason": reason[:300],
        },
    )


async def _decode(
    broker: KafkaBroker, record: Any, topic: TopicSpec, dlq: TopicSpec
) -> CloudEvent | None:
    """The record's event, or None once it is dead-lettered: not a valid CloudEvent of a
    known type, or a type that does not belong on `topic`. One rule for every consumer."""
    try:
        event = CloudEvent.from_kafka(record.value, _record_headers(record))
    except MalformedEvent as error:
        await _dead_letter(broker, record, dlq, str(error))
        return None
    if not topic.belongs(event.data):
        await _dead_letter(broker, record, dlq, f"{event.type} does not belong on {topic.name}")
        return None
    return event


def subscribe_events(
    broker: KafkaBroker, topic: TopicSpec, *, group: str, handler: EventHandler
) -> TopicSpec:
    """Consume `topic` as consumer group `group`, calling `handler` per decoded event.

    Returns the group's dead-letter topic (create it with the other topics).
    Ordering per partition is kept: a transient failure rewinds to the same
    message instead of skipping ahead.
    """
    dlq = dead_letter_topic(group)

    async def consume(message: KafkaMessage) -> None:
        record: Any = message.raw_message
        event = await _decode(broker, record, topic, dlq)
        if event is None:
            await message.ack()
            return
        try:
            await handler(event)
        except PermanentEventError as error:
            await _dead_letter(broker, record, dlq, f"{type(error).__name__}: {error}")
            await message.ack()
            return
        except Exception:
            log.exception("event handler failed; retrying", extra={"event_id": event.id})
            await asyncio.sleep(RETRY_BACKOFF_S)
            await message.nack()
            return
        await message.ack()

    broker.subscriber(topic.name, group_id=group, **CONSUMER_OPTIONS)(consume)
    return dlq


BatchHandler = Callable[[list[CloudEvent]], Awaitable[None]]


def subscribe_event_batches(
    broker: KafkaBroker,
    topic: TopicSpec,
    *,
    group: str,
    handler: BatchHandler,
    max_records: int = 500,
) -> TopicSpec:
    """Like `subscribe_events`, a batch at a time, for consumers whose write is one
    bulk insert. The handler gets the batch's events that belong on the topic.
    Offsets are committed once the handler returned; if it raised, the whole
    batch is read again (so the handler must be idempotent)."""
    dlq = dead_letter_topic(group)

    async def consume(message: KafkaMessage) -> None:
        raw: Any = message.raw_message
        records = raw if isinstance(raw, tuple) else (raw,)
        events: list[CloudEvent] = []
        for record in records:
            event = await _decode(broker, record, topic, dlq)
            if event is not None:
                events.append(event)
        try:
            await handler(events)
        except Exception:
            log.exception("batch handler failed; retrying", extra={"records": len(records)})
            await asyncio.sleep(RETRY_BACKOFF_S)
            await message.nack()
            return
        await message.ack()

    broker.subscriber(
        topic.name, group_id=group, batch=True, max_records=max_records, **CONSUMER_OPTIONS
    )(consume)
    return dlq
