"""Metering throughput and lag, against a raw aiokafka consume loop, side by side.

Both read the whole lifecycle topic from the beginning with a fresh consumer
group, each in its own process pinned to core 1 (the publisher and the
probes keep to core 0):
  raw       aiokafka: poll, then commit, nothing else (the ceiling)
  metering  the metering service itself: decode and validate the CloudEvent,
            write the fact to FerretDB (one insert, a duplicate key for a
            replay), then commit
Then, with metering caught up, the lag from publishing a lifecycle to its
usage being visible in the usage API, p50/p99.

The bench metering process has its own fresh group and database (dropped at
the end) and its periodic jobs switched off, so it measures ingestion only.
The stack's own metering service is paused (SIGSTOP) meanwhile, so the two do
not share the database's time, and resumed after.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import time
import uuid
from datetime import UTC, datetime, timedelta

import httpx
from aiokafka import AIOKafkaProducer, TopicPartition
from pymongo import AsyncMongoClient

from gpucloud_libs.events import CloudEvent, InstanceStateChanged
from gpucloud_libs.identity import SignedAs
from gpucloud_libs.kafka_connection import KafkaConnection
from gpucloud_libs.topics import INSTANCE_LIFECYCLE
from gpucloud_stack import layout

from .common import (
    end_offsets,
    gateway_signer,
    percentile,
    run_raw,
    run_service_until_caught_up,
    stack_env,
)

BENCH_PORT = 8103
TOPIC = INSTANCE_LIFECYCLE.name


def _events(tenant_id: str, instance_id: str, start: datetime, seconds: float) -> list[CloudEvent]:
    states = [("pending", start), ("scheduled", start), ("running", start),
              ("stopped", start + timedelta(seconds=seconds))]  # fmt: skip
    return [
        CloudEvent.new(
            InstanceStateChanged(
                instance_id=instance_id,
                tenant_id=tenant_id,
                spec_name="bench",
                gpu_type="BENCH",
                gpu_count=1,
                state=state,
                sequence=index + 1,
                at=at,
            ),
            source="/bench",
            event_id=f"{tenant_id}/{instance_id}#{index + 1}",
        )
        for index, (state, at) in enumerate(states)
    ]


async def publish(kafka: KafkaConnection, events: list[CloudEvent]) -> None:
    producer = AIOKafkaProducer(
        **kafka.client_options(), acks="all", enable_idempotence=True, linger_ms=5
    )
    await producer.start()
    try:
        sends = []
        for event in events:
            key, value, headers = event.to_kafka()
            sends.append(await producer.send(TOPIC, value, key=key,
                                             headers=[(k, v.encode()) for k, v in headers.items()]))  # fmt: skip
        await asyncio.gather(*sends)
    finally:
        await producer.stop()


def copy_settings() -> dict[str, str]:
    """What the bench's metering copy runs with over the stack's settings: no budget
    or usage passes while it is timed."""
    return {"GPUCLOUD_BUDGET_INTERVAL_S": "1000000", "GPUCLOUD_USAGE_INTERVAL_S": "1000000"}


async def run_metering(
    env: dict[str, str], targets: dict[TopicPartition, int], name: str
) -> tuple[int, float, subprocess.Popen[bytes]]:
    """Start the bench metering process; returns (records, seconds to catch up, process)."""
    elapsed, process = await run_service_until_caught_up(
        "metering", env, name=name, port=BENCH_PORT, topic=TOPIC, targets=targets,
        settings=copy_settings(),
    )  # fmt: skip
    async with httpx.AsyncClient() as http:  # serving, for the lag probes
        while (await http.get(f"http://127.0.0.1:{BENCH_PORT}/healthz")).status_code != 200:
            await asyncio.sleep(0.1)
    return sum(targets.values()), elapsed, process


async def lag(env: dict[str, str], probes: int) -> list[float]:
    tenant_id = f"bench-lag-{uuid.uuid4().hex[:8]}"
    auth = SignedAs(
        gateway_signer(),
        audience="metering",
        role="tenant-admin",
        tenant_id=tenant_id,
        subject="bench",
    )
    seconds = []
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{BENCH_PORT}", timeout=30, auth=auth
    ) as http:
        for index in range(probes):
            instance_id = f"probe-{index}"
            events = _events(tenant_id, instance_id, datetime(2026, 10, 1, tzinfo=UTC), 1.0)
            started = time.perf_counter()
            await publish(KafkaConnection.from_env(env), events)
            while True:
                response = await http.get(
                    f"/usage/instances/{instance_id}",
                    params={"start": "2026-10-01T00:00:00Z", "end": "2026-10-02T00:00:00Z"},
                )
                if (
                    response.status_code == 200
                    and response.json()["total"]["gpuMicroseconds"] == 1_000_000
                ):
                    break
                await asyncio.sleep(0.005)
            seconds.append(time.perf_counter() - started)
    return seconds


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench metering", description=__doc__)
    parser.add_argument(
        "--lifecycles", type=int, default=5000, help="4 events each, added to the topic"
    )
    parser.add_argument("--probes", type=int, default=50)
    return parser


async def main(args: argparse.Namespace) -> None:
    os.sched_setaffinity(0, {0})
    env = stack_env()
    kafka = KafkaConnection.from_env(env)
    tenant_id = f"bench-m-{uuid.uuid4().hex[:8]}"
    start = datetime(2026, 10, 1, tzinfo=UTC)
    events = [e for i in range(args.lifecycles) for e in _events(tenant_id, f"i{i}", start, 60.0)]
    await publish(kafka, events)
    targets = await end_offsets(kafka, TOPIC)

    raw_records, raw_s = await run_raw(env, TOPIC, targets)
    # A fresh consumer group and database each run, dropped afterwards.
    name = f"meteringbench{uuid.uuid4().hex[:8]}"
    # The stack's own metering would ingest the same new events into the same
    # database at the same time: it is paused for the measurement.
    stack_metering = int(layout.pid_file("metering").read_text())
    os.kill(stack_metering, signal.SIGSTOP)
    started: list[subprocess.Popen[bytes]] = []
    try:
        records, metering_s, process = await run_metering(env, targets, name)
        started.append(process)
        probes = await lag(env, args.probes)
    finally:
        os.kill(stack_metering, signal.SIGCONT)
        for process in started:
            process.terminate()
            process.wait(timeout=10)
        mongo: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(env["GPUCLOUD_MONGODB_URI"])
        await mongo.drop_database(f"gpucloud_{name}")
        await mongo.close()

    raw_rate, metering_rate = raw_records / raw_s, records / metering_s
    print(f"the lifecycle topic: {records} records ({len(events)} added by this run)")
    print(f"  raw aiokafka loop   {raw_rate:9.0f} events/s  ({raw_s:.1f} s)")
    print(
        f"  metering            {metering_rate:9.0f} events/s  ({metering_s:.1f} s, from process start)"
    )
    print(f"  metering / raw: x{metering_rate / raw_rate:.3f}")
    ms = [s * 1000 for s in probes]
    print(f"lag, publish to visible in the usage API ({len(ms)} probes): "
          f"p50 {percentile(ms, 50):.0f} ms, p99 {percentile(ms, 99):.0f} ms")  # fmt: skip
