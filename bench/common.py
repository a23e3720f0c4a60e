"""What every benchmark needs: the stack's command line and settings, core pinning,
percentiles, and the raw aiokafka consume loop the services are measured against.

`python -m bench.common --raw-loop TOPIC GROUP TARGETS` is that loop's
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
from typing import Any

import httpx
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config

from gpucloud_libs.identity import IdentitySigner
from gpucloud_libs.kafka_connection import KafkaConnection
from gpucloud_libs.topics import dead_letter_topic, ensure_topics

STACK = [sys.executable, str(Path(__file__).resolve().parents[1] / "deploy" / "local" / "stack.py")]
#: Pins a child process to a core, so "per core" figures mean one core.
TASKSET = shutil.which("taskset") or "/usr/bin/taskset"


def _stack_process_env(store: str | None) -> dict[str, str] | None:
    return None if store is None else {**os.environ, "GPUCLOUD_OBJECT_STORE": store}


def stack(*args: str, store: str | None = None) -> str:
    """`stack ARGS` on this checkout; `store` picks the object store's stack (minio, ceph)
    instead of the one GPUCLOUD_OBJECT_STORE names."""
    done = subprocess.run(
        [*STACK, *args], capture_output=True, text=True, check=False, env=_stack_process_env(store)
    )
    if done.returncode != 0:
        raise RuntimeError(f"stack {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


def stack_running(store: str) -> bool:
    """Whether every component of that object store's stack is healthy."""
    status = subprocess.run(
        [*STACK, "status"],
        check=False,
        capture_output=True,
        text=True,
        env=_stack_process_env(store),
    )
    return status.returncode == 0


def stack_env(service: str | None = None, store: str | None = None) -> dict[str, str]:
    """The running stack's GPUCLOUD_* settings (`stack env --json`): the operator's, or
    those `service` runs with (its own Kafka principal and keys)."""
    env: dict[str, str] = json.loads(
        stack("env", "--json", *(["--service", service] if service else []), store=store)
    )
    return env


async def kube_client(env: dict[str, str]) -> k8s.ApiClient:
    """A Kubernetes API client for the stack's cluster (its kubeconfig); close it after."""
    configuration = k8s.Configuration()
    await k8s_config.load_kube_config(
        config_file=env["GPUCLOUD_KUBECONFIG"], client_configuration=configuration
    )
    return k8s.ApiClient(configuration)


def gateway_signer() -> IdentitySigner:
    """Signs identities as the gateway does, for calls straight to a service."""
    key = stack_env("gateway")["GPUCLOUD_IDENTITY_PRIVATE_KEY"]
    return IdentitySigner("gateway", key, setting="GPUCLOUD_IDENTITY_PRIVATE_KEY")


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(pct / 100 * len(ordered)) - 1))
    return ordered[index]


async def end_offsets(kafka: KafkaConnection, topic: str) -> dict[TopicPartition, int]:
    """The end offset of each partition of `topic` that holds records."""
    consumer = AIOKafkaConsumer(**kafka.client_options())
    await consumer.start()
    try:
        await consumer._client.force_metadata_update()
        partitions = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or []]
        beginning = await consumer.beginning_offsets(partitions)
        ends = await consumer.end_offsets(partitions)
        return {tp: ends[tp] for tp in partitions if ends[tp] > beginning[tp]}
    finally:
        await consumer.stop()


async def committed(kafka: KafkaConnection, group: str, topic: str) -> dict[TopicPartition, int]:
    admin = AIOKafkaAdminClient(**kafka.client_options())
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group)
        return {tp: meta.offset for tp, meta in offsets.items() if tp.topic == topic}
    finally:
        await admin.close()


async def raw_loop(topic: str, group: str, targets: dict[str, int]) -> None:
    """Child process: consume and commit up to the targets; print how long it took.
    It signs in as its parent tells it (GPUCLOUD_KAFKA_* in its environment)."""
    consumer = AIOKafkaConsumer(
        topic, **KafkaConnection.from_env(os.environ).client_options(), group_id=group,
        enable_auto_commit=False,
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
    env: dict[str, str], topic: str, targets: dict[TopicPartition, int]
) -> tuple[int, float]:
    """The raw loop over `topic` up to `targets`, pinned to core 1: (records, seconds)."""
    arg = json.dumps({str(tp.partition): offset for tp, offset in targets.items()})
    process = await asyncio.create_subprocess_exec(
        TASKSET, "-c", "1", sys.executable, "-m", "bench.common", "--raw-loop",
        topic, f"bench-raw-{uuid.uuid4().hex[:8]}", arg, stdout=asyncio.subprocess.PIPE,
        env={**os.environ, **env},
    )  # fmt: skip
    out, _ = await process.communicate()
    result = json.loads(out.decode().strip().splitlines()[-1])
    return int(result["records"]), float(result["seconds"])


async def start_service(
    service: str, env: dict[str, str], *, name: str, port: int, settings: dict[str, str]
) -> subprocess.Popen[bytes]:
    """Start `python -m gpucloud_<service>` pinned to core 1, as `name` (its own consumer
    group and database), with the bench's `settings` over the stack's."""
    process_env = {
        **os.environ, **env, "GPUCLOUD_SERVICE_NAME": name, "GPUCLOUD_HTTP_PORT": str(port),
        "GPUCLOUD_LOG_LEVEL": "WARNING", **settings,
    }  # fmt: skip
    # Services never create topics: the operator (this benchmark) makes the copy's own.
    await ensure_topics(KafkaConnection.from_env(env), [dead_letter_topic(f"gpucloud-{name}")])
    with service_log(service).open("w") as out:
        return subprocess.Popen(  # noqa: ASYNC220 - a long-lived child, watched by the caller
            [TASKSET, "-c", "1", sys.executable, "-m", f"gpucloud_{service}"],
            env=process_env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip


def service_log(service: str) -> Path:
    return Path(tempfile.gettempdir()) / f"gpucloud-bench-{service}.log"


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
    """`start_service`, then wait until it has committed `targets` on `topic`.

    Returns the seconds from process start, and the process, still running.
    """
    process = await start_service(service, env, name=name, port=port, settings=settings or {})
    kafka = KafkaConnection.from_env(env)
    started = time.perf_counter()
    while True:
        done = await committed(kafka, f"gpucloud-{name}", topic)
        if all(done.get(tp, 0) >= offset for tp, offset in targets.items()):
            return time.perf_counter() - started, process
        if process.poll() is not None:
            raise RuntimeError(f"the bench {service} process exited; see {service_log(service)}")
        await asyncio.sleep(0.25)


async def bench_tenant(
    http: httpx.AsyncClient,
    admin: dict[str, str],
    prefix: str,
    *,
    max_gpus: int = 0,
    max_instances: int = 0,
) -> tuple[str, dict[str, str]]:
    """A tenant for a benchmark, with the rate limit out of the way (and, unless asked,
    no GPUs): (its id, its admin's headers)."""
    tenant_id = f"{prefix}-{os.urandom(3).hex()}"
    created = await http.post(
        "/v1/tenants",
        json={
            "tenantID": tenant_id,
            "name": "benchmark",
            "limits": {
                "maxGpus": max_gpus,
                "maxInstances": max_instances,
                "maxStorageBytes": 64 * 1024**3,
            },
            "admin": {"email": f"admin@{tenant_id}.test", "name": "Bench", "role": "tenant-admin"},
            "rateLimit": {"requestsPerS": 10_000, "burst": 10_000},
        },
        headers=admin,
    )
    created.raise_for_status()
    return tenant_id, {"Authorization": f"Bearer {created.json()['adminKey']['secret']}"}


async def object_storage(
    http: httpx.AsyncClient, headers: dict[str, str], size: int
) -> dict[str, Any]:
    for _ in range(60):  # the tenant reaches the storage service by event
        response = await http.post(
            "/v1/storages", json={"kind": "object", "sizeBytes": size}, headers=headers
        )
        if response.status_code == 201:
            storage: dict[str, Any] = response.json()
            return storage
        await asyncio.sleep(0.5)
    raise RuntimeError(f"no storage: {response.text}")


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "--raw-loop":
    asyncio.run(raw_loop(sys.argv[2], sys.argv[3], json.loads(sys.argv[4])))
