"""Helpers shared by the tests: polling for eventual results and raw Kafka reads."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit

from aiohttp import web
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from kubernetes_asyncio import client as k8s
from playwright.async_api import Page, expect

from gpucloud_libs.kafka_connection import KafkaConnection
from gpucloud_libs.node_seals import ReportT, node_key, seal
from gpucloud_stack import fleet

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


def as_its_node(report: ReportT, env: dict[str, str]) -> ReportT:
    """`report` under the seal of the node it names, as that node's agent sends it
    (`env`: the stack's, which holds the telemetry secret the simulator holds)."""
    return seal(node_key(env["GPUCLOUD_TELEMETRY_SECRET"], report.node), report)


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


async def aggregate_events(
    kafka: KafkaConnection, topic: str, key: str, *, expect: int, timeout: float = 30.0
) -> list[dict[str, Any]]:
    """The events published on `topic` for one aggregate (its message key, e.g.
    `<tenant>/<job>`), in order: until `expect` arrived or `timeout` passed."""
    consumer = AIOKafkaConsumer(
        topic, **kafka.client_options(), group_id=None, enable_auto_commit=False,
        auto_offset_reset="earliest",
    )  # fmt: skip
    await consumer.start()
    found: list[dict[str, Any]] = []
    try:
        deadline = time.monotonic() + timeout
        while len(found) < expect and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                found += [json.loads(r.value) for r in records if r.key == key.encode()]
        return found
    finally:
        await consumer.stop()


async def consumed(
    kafka: KafkaConnection, group: str, topic: str, *, timeout: float = 30.0
) -> None:
    """Wait until consumer `group` has processed everything on `topic` so far: its
    committed offsets reach the partitions' ends as they are now (a service commits
    only what it processed). The positive barrier before a check that nothing changed."""
    probe = AIOKafkaConsumer(**kafka.client_options(), group_id=None, enable_auto_commit=False)
    admin = AIOKafkaAdminClient(**kafka.client_options())
    async with contextlib.AsyncExitStack() as stack:
        await probe.start()
        stack.push_async_callback(probe.stop)
        await admin.start()
        stack.push_async_callback(admin.close)
        [described] = await admin.describe_topics([topic])
        partitions = [TopicPartition(topic, p["partition"]) for p in described["partitions"]]
        ends = await probe.end_offsets(partitions)
        assert partitions, f"no partitions of {topic}: the barrier would wait for nothing"
        assert ends.keys() == set(partitions), ends

        async def caught_up() -> bool:
            committed = await admin.list_consumer_group_offsets(group, partitions=partitions)
            return all(
                (meta := committed.get(tp)) is not None and meta.offset >= end
                for tp, end in ends.items()
                if end > 0
            )

        await eventually(caught_up, timeout=timeout, interval=0.2)


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


@contextlib.asynccontextmanager
async def loopback_gpu_nodes(
    kube: k8s.ApiClient, count: int, *, gpus: int = 2, pod_cidr: str | None = None
) -> AsyncIterator[tuple[str, list[str]]]:
    """kwok GPU nodes of a GPU product of their own, alternating between two zones,
    whose pods get 127.x.y.z addresses: a test serves a workload on a pod's own
    address. `pod_cidr` gives every node that range instead (a test of what the
    platform refuses to dial). Yields (product, node names); the nodes are deleted after."""
    core = k8s.CoreV1Api(kube)
    product, base = unique("LOOP-GPU"), random.randint(100, 240)
    names = [unique("loop") for _ in range(count)]
    for index, name in enumerate(names):
        node: Any = fleet.gpu_node(
            name, product=product, gpus=gpus, zone=f"zone-{'ab'[index % 2]}", cpu="32",
            memory="256Gi", pod_cidr=pod_cidr or f"127.{base}.{random.randint(0, 250)}.0/24",
        )  # fmt: skip
        await core.create_node(node)

    async def schedulable() -> bool:
        """Every node Ready, and its not-ready taint gone: the scheduler can use all of
        them, so a test's placement sees the whole set."""
        for name in names:
            found = await core.read_node(name)
            ready = any(
                c.type == "Ready" and c.status == "True" for c in found.status.conditions or []
            )
            tainted = any(t.key.startswith("node.kubernetes.io/") for t in found.spec.taints or [])
            if not ready or tainted:
                return False
        return True

    try:
        await eventually(schedulable, timeout=60, interval=0.2)
        yield product, names
    finally:
        for name in names:
            with contextlib.suppress(k8s.ApiException):
                await core.delete_node(name)


def url_host(url: str) -> str:
    """The `host[:port]` of an instance or service URL: what a client sends as Host
    (the local stack's URLs carry the gateway's port; production's carry none)."""
    return urlsplit(url).netloc


def url_path(url: str) -> str:
    """The path and query of a URL: what a test sends to the gateway with its Host."""
    parts = urlsplit(url)
    return parts.path + (f"?{parts.query}" if parts.query else "")


async def stand_in_text(page: Page, url: str) -> str:
    """Open `url` (an instance's session link) until the simulated node's stand-in for
    the pod answers, which it does moments after the pod runs: its page's text."""

    async def landed() -> str | None:
        answer = await page.goto(url)
        text = await page.inner_text("body") if answer and answer.ok else ""
        return text if "Simulated workload" in text else None

    return await eventually(landed, timeout=30, interval=1)


async def sign_in_with_key(page: Page, key: str) -> None:
    """The console's sign-in with an API key, until it shows the signed-in shell."""
    await page.goto("/")
    await page.get_by_role("radio", name="An API key").check()
    await page.get_by_label("API key", exact=True).fill(key)
    await page.get_by_role("button", name="Sign in").click()
    await expect(page.get_by_role("button", name="Sign out")).to_be_visible()
