"""Telemetry ingestion against a raw aiokafka consume loop, side by side, and alert latency.

A simulated fleet of 8,000 GPUs (1,000 nodes of 8) reports once a second for
`--seconds` seconds: one batch per node per second, added to the telemetry
topic. Then, each in its own process pinned to core 1 (this process keeps to
core 0), a fresh consumer group reads the topic from the beginning:
  raw         aiokafka: poll, then commit, nothing else (the ceiling)
  monitoring  the monitoring service itself: decode and validate each batch,
              roll it up, evaluate the alert rules and node health, write the
              closed windows (one bulk insert per batch), then commit
The rate that matters is samples/s: 8,000 GPUs at 1 Hz is 8,000 samples/s.

Then, with the bench monitoring process caught up, alert latency: a rule
(temperature above 90 °C, no duration) and, one at a time, a batch with one hot
GPU; the time from publishing it to the firing event on the alerts topic.

The stack's own monitoring and GPU simulator are paused (SIGSTOP) meanwhile.
`python -m bench monitoring [--seconds 30] [--probes 50]`
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
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from pymongo import AsyncMongoClient

from gpucloud_agent.simulated import Placement, SimulatedFleet
from gpucloud_libs.events import CloudEvent, TelemetryBatch
from gpucloud_libs.identity import SignedAs
from gpucloud_libs.kafka_connection import KafkaConnection
from gpucloud_libs.node_seals import node_key, seal
from gpucloud_libs.topics import ALERTS, TELEMETRY
from gpucloud_monitoring.webhook_secrets import WebhookSecrets
from gpucloud_stack import layout

from .common import (
    end_offsets,
    gateway_signer,
    percentile,
    run_raw,
    run_service_until_caught_up,
    stack_env,
)

BENCH_PORT = 8104
NODES, GPUS_PER_NODE = 1000, 8


async def _producer(kafka: KafkaConnection) -> AIOKafkaProducer:
    producer = AIOKafkaProducer(**kafka.client_options(), acks="all", linger_ms=5)
    await producer.start()
    return producer


async def _send(
    producer: AIOKafkaProducer, batch: TelemetryBatch, secret: str
) -> asyncio.Future[object]:
    """Send `batch` under its node's seal, as the simulator would."""
    sealed = seal(node_key(secret, batch.node), batch)
    key, value, headers = CloudEvent.new(sealed, source="/bench").to_kafka()
    future: asyncio.Future[object] = await producer.send(
        TELEMETRY.name, value, key=key, headers=[(k, v.encode()) for k, v in headers.items()]
    )
    return future


async def publish_fleet(kafka: KafkaConnection, secret: str, seconds: int, run: str) -> int:
    """`seconds` of telemetry of the whole fleet, back-dated to end now; returns samples."""
    fleet = SimulatedFleet(seed=3)
    names = [f"bench-{run}-{index}" for index in range(NODES)]
    for name in names:
        fleet.set_node(name, "NVIDIA-H100-80GB-HBM3", GPUS_PER_NODE)
        fleet.place(
            name, [Placement("bench", f"i-{name}-{gpu}", 1) for gpu in range(GPUS_PER_NODE // 2)]
        )
    producer = await _producer(kafka)
    start = datetime.now(UTC) - timedelta(seconds=seconds)
    try:
        for second in range(seconds):
            at = start + timedelta(seconds=second)
            sends = [
                await _send(
                    producer,
                    TelemetryBatch(
                        node=name, source="simulated", samples=tuple(fleet.sample(name, at))
                    ),
                    secret,
                )
                for name in names
            ]
            await asyncio.gather(*sends)
    finally:
        await producer.stop()
    return seconds * NODES * GPUS_PER_NODE


async def alert_latency(env: dict[str, str], probes: int, run: str) -> list[float]:
    kafka = KafkaConnection.from_env(env)
    auth = SignedAs(
        gateway_signer(),
        audience="monitoring",
        role="platform-admin",
        tenant_id=None,
        subject="bench",
    )
    node = f"bench-{run}-probe"
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{BENCH_PORT}", timeout=30, auth=auth
    ) as http:
        while (await http.get("/healthz")).status_code != 200:
            await asyncio.sleep(0.1)
        rule = await http.post(
            "/alert-rules",
            json={"name": "bench", "metric": "temperature_c", "threshold": 90, "durationS": 0,
                  "node": node, "severity": "critical"},
        )  # fmt: skip
        rule.raise_for_status()
    alerts = AIOKafkaConsumer(ALERTS.name, **kafka.client_options(), auto_offset_reset="latest")
    await alerts.start()
    producer = await _producer(kafka)
    fleet = SimulatedFleet(seed=5)
    fleet.set_node(node, "NVIDIA-H100-80GB-HBM3", 1)
    fleet.inject(node, 0, "overheat")
    seconds = []
    try:
        await alerts.getmany(timeout_ms=500)  # assigned, positioned at the end
        for index in range(probes):
            sample = fleet.sample(node, datetime.now(UTC))[0].model_copy(
                update={"gpu_uuid": f"GPU-{run}-{index}"}
            )
            started = time.perf_counter()
            await (
                await _send(
                    producer,
                    TelemetryBatch(node=node, source="simulated", samples=(sample,)),
                    env["GPUCLOUD_TELEMETRY_SECRET"],
                )
            )
            while True:
                batch = await alerts.getmany(timeout_ms=1000)
                if any(
                    sample.gpu_uuid.encode() in r.value
                    for records in batch.values()
                    for r in records
                ):
                    break
            seconds.append(time.perf_counter() - started)
    finally:
        await producer.stop()
        await alerts.stop()
    return seconds


def _pause(component: str) -> int | None:
    try:
        pid = int(layout.pid_file(component).read_text())
    except (OSError, ValueError):
        return None
    os.kill(pid, signal.SIGSTOP)
    return pid


def copy_settings() -> dict[str, str]:
    """What the bench's monitoring copy runs with over the stack's settings: it seals
    its own (bench) webhook secrets, with a key of its own, not the stack's, and takes
    the telemetry of its thousand simulated nodes, which the cluster does not have (the
    stack's own monitoring refuses them)."""
    return {
        "GPUCLOUD_WEBHOOK_SECRETS_KEY": WebhookSecrets.generate_key(),
        "GPUCLOUD_KNOWN_NODES_ONLY": "false",
    }


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench monitoring", description=__doc__)
    parser.add_argument("--seconds", type=int, default=30, help="seconds of fleet telemetry")
    parser.add_argument("--probes", type=int, default=50)
    return parser


async def main(args: argparse.Namespace) -> None:
    os.sched_setaffinity(0, {0})
    env = stack_env()
    kafka = KafkaConnection.from_env(env)
    run = uuid.uuid4().hex[:6]
    paused = [pid for pid in (_pause("monitoring"), _pause("gpu-simulator")) if pid]
    name = f"monitoringbench{run}"
    started: list[subprocess.Popen[bytes]] = []
    try:
        published = time.perf_counter()
        samples = await publish_fleet(kafka, env["GPUCLOUD_TELEMETRY_SECRET"], args.seconds, run)
        publish_s = time.perf_counter() - published
        targets = await end_offsets(kafka, TELEMETRY.name)
        records = sum(targets.values())  # the topic from its start, old records included
        raw_records, raw_s = await run_raw(env, TELEMETRY.name, targets)
        monitoring_s, process = await run_service_until_caught_up(
            "monitoring", env, name=name, port=BENCH_PORT, topic=TELEMETRY.name,
            targets=targets, settings=copy_settings(),
        )  # fmt: skip
        started.append(process)
        probes = await alert_latency(env, args.probes, run)
    finally:
        for pid in paused:
            os.kill(pid, signal.SIGCONT)
        for process in started:
            process.terminate()
            process.wait(timeout=10)
        mongo: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(env["GPUCLOUD_MONGODB_URI"])
        await mongo.drop_database(f"gpucloud_{name}")
        await mongo.close()

    per_record = samples / (args.seconds * NODES)
    print(f"{NODES * GPUS_PER_NODE:,} GPUs x {args.seconds} s: {samples:,} samples in "
          f"{args.seconds * NODES:,} batches, published in {publish_s:.1f} s; "
          f"the topic holds {raw_records:,} records")  # fmt: skip
    raw_rate = raw_records * per_record / raw_s
    ours = records * per_record / monitoring_s
    print(f"  raw aiokafka loop   {raw_rate:10,.0f} samples/s  ({raw_s:.1f} s)")
    print(
        f"  monitoring          {ours:10,.0f} samples/s  ({monitoring_s:.1f} s, from process start)"
    )
    print(f"  monitoring / raw: x{ours / raw_rate:.3f}; 8,000 GPUs at 1 Hz need 8,000 samples/s")
    ms = [s * 1000 for s in probes]
    print(f"alert latency, publish to firing event ({len(ms)} probes): "
          f"p50 {percentile(ms, 50):.0f} ms, p99 {percentile(ms, 99):.0f} ms")  # fmt: skip
