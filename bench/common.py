"""What every benchmark needs: the stack's command line and settings, core pinning,
percentiles, and the raw aiokafka consume loop the services are measured against.

`python -m bench.common --raw-loop BOOTSTRAP TOPIC GROUP TARGETS` is that loop's
child process (pinned to a core by `run_raw`)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

STACK = [sys.executable, str(Path(__file__).resolve().parents[1] / "deploy" / "local" / "stack.py")]
#: Pins a child process to a core, so "per core" figures mean one core.
TASKSET = shutil.which("taskset") or "/usr/bin/taskset"


def stack(*args: str) -> str:
    return subprocess.run([*STACK, *args], capture_output=True, text=True, check=True).stdout


def stack_env() -> dict[str, str]:
    """The running stack's GPUCLOUD_* settings (`stack env --json`)."""
    env: dict[str, str] = json.loads(stack("env", "--json"))
    return env


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(pct / 100 * len(ordered)) - 1))
    return ordered[index]


async def end_offsets(bootstrap: str, topic: str) -> dict[TopicPartition, int]:
    """The end offset of each partition of `topic` that holds records."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        await consumer._client.force_metadata_update()
        partitions = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or []]
        beginning = await consumer.beginning_offsets(partitions)
        ends = await consumer.end_offsets(partitions)
        return {tp: ends[tp] for tp in partitions if ends[tp] > beginning[tp]}
    finally:
        await consumer.stop()


async def committed(bootstrap: str, group: str, topic: str) -> dict[TopicPartition, int]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group)
        return {tp: meta.offset for tp, meta in offsets.items() if tp.topic == topic}
    finally:
        await admin.close()


async def raw_loop(bootstrap: str, topic: str, group: str, targets: dict[str, int]) -> None:
    """Child process: consume and commit up to the targets; print how long it took."""
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
        auto_offset_reset="earliest", isolation_level="read_committed", max_poll_records=500,
    )  # fmt: skip
    await consumer.start()
    want = {TopicPartition(topic, int(p)): offset for p, offset in targets.items()}
    count, started = 0, time.perf_counter()
    try:
        while [tp for tp, offset in want.items() if await consumer.position(tp) < offset]:
            batch = await consumer.getmany(timeout_ms=200)
            count += sum(len(records) for records in batch.values())
            await consumer.commit()
    finally:
        await consumer.stop()
    print(json.dumps({"records": count, "seconds": time.perf_counter() - started}))


async def run_raw(
    bootstrap: str, topic: str, targets: dict[TopicPartition, int]
) -> tuple[int, float]:
    """The raw loop over `topic` up to `targets`, pinned to core 1: (records, seconds)."""
    arg = json.dumps({str(tp.partition): offset for tp, offset in targets.items()})
    process = await asyncio.create_subprocess_exec(
        TASKSET, "-c", "1", sys.executable, "-m", "bench.common", "--raw-loop",
        bootstrap, topic, f"bench-raw-{uuid.uuid4().hex[:8]}", arg, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, _ = await process.communicate()
    result = json.loads(out.decode().strip().splitlines()[-1])
    return int(result["records"]), float(result["seconds"])


async def run_service_until_caught_up(
    service: str,
    env: dict[str, str],
    *,
    name: str,
    port: int,
    topic: str,
    targets: dict[TopicPartition, int],
    settings: dict[str, str] | None = None,
) -> tuple[float, subprocess.Popen[bytes]]:
    """Start `python -m gpucloud_<service>` pinned to core 1, as `name` (its own consumer
    group and database), and wait until it has committed `targets` on `topic`.

    Returns the seconds from process start, and the process, still running.
    """
    process_env = {
        **os.environ, **env, "GPUCLOUD_SERVICE_NAME": name, "GPUCLOUD_HTTP_PORT": str(port),
        "GPUCLOUD_LOG_LEVEL": "WARNING", **(settings or {}),
    }  # fmt: skip
    log = Path(tempfile.gettempdir()) / f"gpucloud-bench-{service}.log"
    with log.open("w") as out:
        process = subprocess.Popen(  # noqa: ASYNC220 - a long-lived child, watched below
            [TASKSET, "-c", "1", sys.executable, "-m", f"gpucloud_{service}"],
            env=process_env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    started = time.perf_counter()
    while True:
        done = await committed(env["GPUCLOUD_KAFKA_BOOTSTRAP"], f"gpucloud-{name}", topic)
        if all(done.get(tp, 0) >= offset for tp, offset in targets.items()):
            return time.perf_counter() - started, process
        if process.poll() is not None:
            raise RuntimeError(f"the bench {service} process exited; see {log}")
        await asyncio.sleep(0.25)


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "--raw-loop":
    asyncio.run(raw_loop(sys.argv[2], sys.argv[3], sys.argv[4], json.loads(sys.argv[5])))
