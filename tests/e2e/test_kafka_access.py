"""Kafka below the API: every client authenticates, and each service's principal may
produce only the topics it owns and read only as its own consumer group. The access
table's own rules are tests/unit/libs/test_kafka_access.py."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import (
    GroupAuthorizationFailedError,
    KafkaConnectionError,
    TopicAuthorizationFailedError,
)

from gpucloud_libs.events import CloudEvent, TenantDeleted
from gpucloud_libs.kafka_connection import KafkaConnection
from gpucloud_libs.topics import INSTANCE_LIFECYCLE, TENANTS, USAGE

from .conftest import stack_service_env


def principal(service: str) -> KafkaConnection:
    """The Kafka connection `service` runs with, as the local stack gives it."""
    return KafkaConnection.from_env(stack_service_env(service))


@pytest.fixture
async def metering_producer(stack_env: dict[str, str]) -> AsyncIterator[AIOKafkaProducer]:
    producer = AIOKafkaProducer(**principal("metering").client_options())
    await producer.start()
    yield producer
    await producer.stop()


async def start_and_fetch(consumer: AIOKafkaConsumer) -> None:
    """Join (or not) and fetch once: a refusal surfaces at one of the two."""
    await consumer.start()
    await consumer.getmany(timeout_ms=3000)


def forged_tenant_deletion() -> tuple[bytes, list[tuple[str, bytes]]]:
    _key, value, headers = CloudEvent.new(
        TenantDeleted(tenant_id="someone-else"), source="/forged"
    ).to_kafka()
    return value, [(name, header.encode()) for name, header in headers.items()]


async def test_an_unauthenticated_client_is_refused(kafka: KafkaConnection) -> None:
    anonymous = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap, request_timeout_ms=5000)
    with pytest.raises(KafkaConnectionError):
        await anonymous.start()
    await anonymous.stop()


async def test_a_wrong_password_is_refused(stack_env: dict[str, str]) -> None:
    real = principal("metering")
    guessed = KafkaConnection(real.bootstrap, username=real.username, password="guessed")
    producer = AIOKafkaProducer(**guessed.client_options(), request_timeout_ms=5000)
    with pytest.raises(KafkaConnectionError):
        await producer.start()
    await producer.stop()


async def test_a_service_cannot_produce_to_a_topic_it_does_not_own(
    metering_producer: AIOKafkaProducer,
) -> None:
    value, headers = forged_tenant_deletion()
    with pytest.raises(TopicAuthorizationFailedError):
        await metering_producer.send_and_wait(TENANTS.name, value, headers=headers)


async def test_a_service_reads_what_it_consumes_but_not_what_it_does_not(
    stack_env: dict[str, str],
) -> None:
    storage = principal("storage")
    allowed = AIOKafkaConsumer(TENANTS.name, group_id=None, **storage.client_options())
    await allowed.start()
    try:
        assert allowed.partitions_for_topic(TENANTS.name)  # storage consumes tenants
    finally:
        await allowed.stop()
    denied = AIOKafkaConsumer(USAGE.name, group_id=None, **storage.client_options())
    with pytest.raises(TopicAuthorizationFailedError):
        await start_and_fetch(denied)
    await denied.stop()


async def test_a_service_cannot_join_another_services_consumer_group(
    stack_env: dict[str, str],
) -> None:
    """Joining would take partitions from the instances service and commit its offsets."""
    metering = principal("metering")
    thief = AIOKafkaConsumer(
        INSTANCE_LIFECYCLE.name, group_id="gpucloud-instances", **metering.client_options()
    )
    with pytest.raises(GroupAuthorizationFailedError):
        await start_and_fetch(thief)
    await thief.stop()
