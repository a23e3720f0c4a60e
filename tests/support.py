"""Helpers shared by the tests: polling for eventual results and raw Kafka reads."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from aiokafka import AIOKafkaConsumer, TopicPartition

T = TypeVar("T")


async def eventually(
    probe: Callable[[], Awaitable[T | None]], *, timeout: float = 30.0, interval: float = 0.2
) -> T:
    """Poll `probe` until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = await probe()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(interval)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


async def read_topic(
    bootstrap: str, topic: str, *, expect: int, timeout: float = 20.0
) -> list[Any]:
    """Read a topic from the beginning, without a consumer group, until `expect` records arrive."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        partitions = [
            TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or {0})
        ]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        records: list[Any] = []
        deadline = time.monotonic() + timeout
        while len(records) < expect and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            for partition_records in batch.values():
                records.extend(partition_records)
        return records
    finally:
        await consumer.stop()
