"""Events over the real Kafka broker into the real MongoDB-wire database (FerretDB)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sized

import pytest
from faststream.kafka import KafkaBroker
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pymongo import AsyncMongoClient
from pymongo.asynchronous.collection import AsyncCollection

from gpucloud_libs.events import CloudEvent, TenantDeleted, TenantQuota, TenantUpserted
from gpucloud_libs.kafka import (
    PermanentEventError,
    create_broker,
    publish_event,
    subscribe_event_batches,
    subscribe_events,
)
from gpucloud_libs.kafka_connection import KafkaConnection
from gpucloud_libs.topics import TopicSpec, ensure_topics

from .support import eventually, read_topic, unique

Handler = Callable[[CloudEvent], Awaitable[None]]
Doc = dict[str, object]


def tenant(name: str) -> TenantUpserted:
    return TenantUpserted(
        tenant_id=unique("tenant"),
        name=name,
        status="active",
        quota=TenantQuota(max_gpus=8, max_instances=4, max_storage_bytes=10**12),
    )


@pytest.fixture
async def collection(mongo: AsyncMongoClient[Doc]) -> AsyncIterator[AsyncCollection[Doc]]:
    coll = mongo["gpucloud_tests"][unique("events")]
    yield coll
    await coll.drop()


def persist_into(coll: AsyncCollection[Doc]) -> Handler:
    async def handle(event: CloudEvent) -> None:
        assert isinstance(event.data, TenantUpserted)
        await coll.update_one(
            {"_id": event.id},
            {"$set": {"tenant_id": event.data.tenant_id, "name": event.data.name}},
            upsert=True,
        )

    return handle


async def start_consumer(
    kafka: KafkaConnection, topic: TopicSpec, group: str, handler: Handler, **broker_args: object
) -> tuple[KafkaBroker, TopicSpec]:
    broker = create_broker(kafka, client_id=unique("test"), **broker_args)  # type: ignore[arg-type]
    dlq = subscribe_events(broker, topic, group=group, handler=handler)
    await ensure_topics(kafka, [topic, dlq])
    await broker.start()
    return broker, dlq


async def test_cloudevent_is_consumed_and_written_to_ferretdb(
    kafka: KafkaConnection, collection: AsyncCollection[Doc]
) -> None:
    topic = TopicSpec(unique("test.tenants"), partitions=1)
    broker, _ = await start_consumer(kafka, topic, unique("g"), persist_into(collection))
    try:
        data = tenant("acme")
        published = await publish_event(broker, topic, data, source="/tests")

        stored = await eventually(lambda: collection.find_one({"_id": published.id}))
        assert stored["tenant_id"] == data.tenant_id
        assert stored["name"] == "acme"
    finally:
        await broker.stop()

    # On the wire: CloudEvents binary mode, keyed by the aggregate id.
    [record] = await read_topic(kafka, topic.name, expect=1)
    headers = {key: value.decode() for key, value in record.headers}
    assert record.key == data.tenant_id.encode()
    assert headers["ce_specversion"] == "1.0"
    assert headers["ce_type"] == "io.gpucloud.tenant.upserted.v1"
    assert headers["ce_id"] == published.id
    assert headers["content-type"] == "application/json"


async def test_poison_message_is_dead_lettered_and_consumption_goes_on(
    kafka: KafkaConnection, collection: AsyncCollection[Doc]
) -> None:
    topic = TopicSpec(unique("test.poison"), partitions=1)
    broker, dlq = await start_consumer(kafka, topic, unique("g"), persist_into(collection))
    try:
        await broker.publish(b"{not json", topic.name, key=b"k")
        good = await publish_event(broker, topic, tenant("after-poison"), source="/tests")

        stored = await eventually(lambda: collection.find_one({"_id": good.id}))
        assert stored["name"] == "after-poison"
    finally:
        await broker.stop()

    [parked] = await read_topic(kafka, dlq.name, expect=1)
    headers = {key: value.decode() for key, value in parked.headers}
    assert parked.value == b"{not json"
    assert headers["x-dlq-topic"] == topic.name
    assert headers["x-dlq-offset"] == "0"
    assert "ce_specversion" in headers["x-dlq-reason"]
    assert await collection.count_documents({}) == 1


@pytest.mark.parametrize("batches", [False, True], ids=["one-at-a-time", "batches"])
async def test_an_event_of_a_type_the_topic_does_not_carry_is_dead_lettered(
    kafka: KafkaConnection, collection: AsyncCollection[Doc], batches: bool
) -> None:
    """One rule for every consumer: the topic declares what it carries, and anything else
    is parked before a handler sees it."""
    topic = TopicSpec(unique("test.typed"), partitions=1, carries=(TenantUpserted,))
    persist = persist_into(collection)
    broker = create_broker(kafka, client_id=unique("test"))
    if batches:

        async def persist_all(events: list[CloudEvent]) -> None:
            for event in events:
                await persist(event)

        dlq = subscribe_event_batches(broker, topic, group=unique("g"), handler=persist_all)
    else:
        dlq = subscribe_events(broker, topic, group=unique("g"), handler=persist)
    await ensure_topics(kafka, [topic, dlq])
    await broker.start()
    try:
        stray = await publish_event(broker, topic, TenantDeleted(tenant_id="t"), source="/tests")
        good = await publish_event(broker, topic, tenant("belongs"), source="/tests")
        await eventually(lambda: collection.find_one({"_id": good.id}))
    finally:
        await broker.stop()

    [parked] = await read_topic(kafka, dlq.name, expect=1)
    headers = {key: value.decode() for key, value in parked.headers}
    assert headers["ce_id"] == stray.id
    assert (
        headers["x-dlq-reason"] == f"io.gpucloud.tenant.deleted.v1 does not belong on {topic.name}"
    )
    assert await collection.count_documents({}) == 1


async def test_handler_rejection_is_dead_lettered(
    kafka: KafkaConnection, collection: AsyncCollection[Doc]
) -> None:
    topic = TopicSpec(unique("test.rejected"), partitions=1)
    rejected_name = "cannot-process"
    persist = persist_into(collection)

    async def handle(event: CloudEvent) -> None:
        assert isinstance(event.data, TenantUpserted)
        if event.data.name == rejected_name:
            raise PermanentEventError("tenant name is reserved")
        await persist(event)

    broker, dlq = await start_consumer(kafka, topic, unique("g"), handle)
    try:
        await publish_event(broker, topic, tenant(rejected_name), source="/tests")
        good = await publish_event(broker, topic, tenant("fine"), source="/tests")
        await eventually(lambda: collection.find_one({"_id": good.id}))
    finally:
        await broker.stop()

    [parked] = await read_topic(kafka, dlq.name, expect=1)
    headers = {key: value.decode() for key, value in parked.headers}
    assert "tenant name is reserved" in headers["x-dlq-reason"]
    assert headers["ce_type"] == "io.gpucloud.tenant.upserted.v1"


async def test_transient_failure_is_retried_not_lost(
    kafka: KafkaConnection, collection: AsyncCollection[Doc]
) -> None:
    topic = TopicSpec(unique("test.retry"), partitions=1)
    persist = persist_into(collection)
    attempts = 0

    async def flaky(event: CloudEvent) -> None:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            raise ConnectionError("database briefly unavailable")
        await persist(event)

    broker, dlq = await start_consumer(kafka, topic, unique("g"), flaky)
    try:
        published = await publish_event(broker, topic, tenant("retried"), source="/tests")
        await eventually(lambda: collection.find_one({"_id": published.id}))
    finally:
        await broker.stop()
    assert attempts == 2
    assert await read_topic(kafka, dlq.name, expect=1, timeout=2) == []


async def test_offsets_are_committed_only_for_processed_events(
    kafka: KafkaConnection, collection: AsyncCollection[Doc]
) -> None:
    """A restarted consumer group resumes after the last processed event, without replaying it."""
    topic = TopicSpec(unique("test.commit"), partitions=1)
    group = unique("g")
    seen: list[str] = []
    persist = persist_into(collection)

    async def record(event: CloudEvent) -> None:
        await persist(event)
        seen.append(event.id)

    broker, _ = await start_consumer(kafka, topic, group, record)
    first = [await publish_event(broker, topic, tenant(f"t{i}"), source="/tests") for i in range(3)]
    await eventually(lambda: _async_len(seen, 3))
    await broker.stop()

    publisher = create_broker(kafka, client_id=unique("test"))
    await publisher.start()
    later = [
        await publish_event(publisher, topic, tenant(f"u{i}"), source="/tests") for i in range(2)
    ]
    await publisher.stop()

    seen.clear()
    broker, _ = await start_consumer(kafka, topic, group, record)
    try:
        await eventually(lambda: _async_len(seen, 2))
    finally:
        await broker.stop()
    assert seen == [event.id for event in later]
    assert await collection.count_documents({}) == len(first) + len(later)


async def _async_len(items: Sized, size: int) -> bool:
    return len(items) >= size


async def test_trace_context_crosses_a_kafka_hop(kafka: KafkaConnection) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("tests")
    topic = TopicSpec(unique("test.trace"), partitions=1)
    consumer_trace_ids: list[int] = []

    async def capture(event: CloudEvent) -> None:
        consumer_trace_ids.append(trace.get_current_span().get_span_context().trace_id)

    broker, _ = await start_consumer(kafka, topic, unique("g"), capture, tracer_provider=provider)
    try:
        with tracer.start_as_current_span("api-request") as span:
            await publish_event(broker, topic, tenant("traced"), source="/tests")
            origin = span.get_span_context().trace_id
        await eventually(lambda: _async_len(consumer_trace_ids, 1))
    finally:
        await broker.stop()

    assert consumer_trace_ids == [origin]
    [record] = await read_topic(kafka, topic.name, expect=1)
    assert any(key == "traceparent" for key, _ in record.headers)
