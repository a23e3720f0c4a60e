"""Helpers shared by the tests: polling for eventual results and raw Kafka reads."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from aiohttp import web
from aiokafka import AIOKafkaConsumer

from gpucloud_libs.kafka_connection import KafkaConnection

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
    kafka: KafkaConnection, topic: str, *, expect: int, timeout: float = 20.0
) -> list[Any]:
    """Read every partition of a topic from the beginning, without a consumer group,
    until `expect` records arrived or `timeout` passed."""
    consumer = AIOKafkaConsumer(
        topic,
        **kafka.client_options(),
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        records: list[Any] = []
        deadline = time.monotonic() + timeout
        while len(records) < expect and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            for partition_records in batch.values():
                records.extend(partition_records)
        return records
    finally:
        await consumer.stop()


@contextlib.asynccontextmanager
async def loopback_server(app: web.Application) -> AsyncIterator[int]:
    """Serve `app` on 127.0.0.1 at a free port, which it yields, until the block ends."""
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    finally:
        await runner.cleanup()
