"""Failover of the instances controller: kill its leader in a burst of starts, time the takeover.

Two replicas of the instances service, each behind a gateway of its own, share the
stack's Kafka, database and cluster (the stack's own instances process is paused
meanwhile, so it takes no part). Starts go through both gateways at once; halfway,
the replica holding the controller lease is killed (SIGKILL). Printed: the time from
the kill to the other replica holding the lease, and to the last acknowledged start
running. `tests/e2e/test_failover.py` runs the same and checks the outcome.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from aiokafka.admin import AIOKafkaAdminClient
from kubernetes_asyncio import client as k8s

from gpucloud_libs.kafka_connection import KafkaConnection
from gpucloud_stack import layout

from .common import bench_tenant, kube_client, stack_env

LEASE = ("gpucloud-stocks", "gpucloud-instances-controller")
#: Short, so a takeover is quick to see; the chart keeps the default 15 s.
LEASE_DURATION_S = 5


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Replica:
    """One instances replica and the gateway that sends it the API's calls."""

    name: str
    port: int
    gateway_port: int
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.gateway_port}"

    def kill(self) -> None:
        """The replica dies at once (no lease hand-over); its gateway stays up."""
        self.processes[0].send_signal(signal.SIGKILL)
        self.processes[0].wait(timeout=10)

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()


def _spawn(module: str, env: dict[str, str], log: str) -> subprocess.Popen[bytes]:
    path = Path(tempfile.gettempdir()) / f"gpucloud-failover-{log}.log"
    with path.open("w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", module], env={**os.environ, **env},
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip


async def start_replica(name: str) -> Replica:
    """An instances replica (lists read from the database, as the chart runs two) and a
    gateway in front of it, both serving."""
    replica = Replica(name, free_port(), free_port())
    instances_env = {
        **stack_env("instances"), "GPUCLOUD_HTTP_PORT": str(replica.port),
        "GPUCLOUD_REPLICA_ID": name, "GPUCLOUD_LISTS_FROM_MEMORY": "false",
        "GPUCLOUD_LEASE_DURATION_S": str(LEASE_DURATION_S),
    }  # fmt: skip
    gateway_env = {
        **stack_env("gateway"), "GPUCLOUD_HTTP_PORT": str(replica.gateway_port),
        "GPUCLOUD_INSTANCES_URL": f"http://127.0.0.1:{replica.port}",
    }  # fmt: skip
    replica.processes.append(_spawn("gpucloud_instances", instances_env, f"{name}-instances"))
    replica.processes.append(_spawn("gpucloud_gateway", gateway_env, f"{name}-gateway"))
    await _until_ready(replica, (replica.port, replica.gateway_port))
    return replica


async def _until_ready(replica: Replica, ports: tuple[int, ...]) -> None:
    async with httpx.AsyncClient() as http:
        for port in ports:
            deadline = time.monotonic() + 60
            while True:
                with contextlib.suppress(httpx.TransportError):
                    if (await http.get(f"http://127.0.0.1:{port}/readyz")).status_code == 200:
                        break
                if time.monotonic() > deadline or any(
                    p.poll() is not None for p in replica.processes
                ):
                    replica.stop()
                    raise RuntimeError(
                        f"replica {replica.name} did not start; see gpucloud-failover-*.log"
                    )
                await asyncio.sleep(0.2)


@contextlib.asynccontextmanager
async def a_second_gateway() -> AsyncIterator[str]:
    """Another gateway replica beside the stack's, before the same services: its URL.
    The gateway consumes nothing, so two share the stack as the chart's two do."""
    replica = Replica(f"gateway-{os.urandom(2).hex()}", 0, free_port())
    env = {**stack_env("gateway"), "GPUCLOUD_HTTP_PORT": str(replica.gateway_port)}
    replica.processes.append(_spawn("gpucloud_gateway", env, replica.name))
    try:
        await _until_ready(replica, (replica.gateway_port,))
        yield replica.url
    finally:
        replica.stop()


@contextlib.contextmanager
def stack_instances_paused() -> Iterator[None]:
    """The stack's own instances process stopped (SIGSTOP) for the duration: the two
    replicas are the only ones to act. It resumes as a follower: its lease is gone."""
    pid = int(layout.pid_file("instances").read_text())
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


@contextlib.asynccontextmanager
async def two_replicas() -> AsyncIterator[tuple[Replica, Replica]]:
    """The two replicas, the stack's own instances process paused meanwhile. On the way
    out, waits until the stack's process alone consumes the service's topics again: a
    killed replica's consumers hold their partitions until the broker times them out,
    and the stack's events would wait behind them."""
    kafka = KafkaConnection.from_env(stack_env())
    members = await _group_members(kafka)
    try:
        with stack_instances_paused():
            replicas: list[Replica] = []
            try:
                for name in ("replica-a", "replica-b"):
                    replicas.append(await start_replica(f"{name}-{os.urandom(2).hex()}"))
                yield replicas[0], replicas[1]
            finally:
                for replica in replicas:
                    replica.stop()
    finally:
        deadline = time.monotonic() + GROUP_SETTLE_S
        while await _group_members(kafka) != members and time.monotonic() < deadline:
            await asyncio.sleep(0.5)


#: The longest a killed consumer's membership lasts: the broker's session timeout, with
#: the rebalance after it.
GROUP_SETTLE_S = 90
INSTANCES_GROUP = "gpucloud-instances"


async def _group_members(kafka: KafkaConnection) -> int:
    """Members of the instances service's consumer group while it is stable, else -1."""
    admin = AIOKafkaAdminClient(**kafka.client_options())
    await admin.start()
    try:
        [answer] = await admin.describe_consumer_groups([INSTANCES_GROUP])
        _, _, state, _, _, members = answer.groups[0]
        return len(members) if state == "Stable" else -1
    finally:
        await admin.close()


async def lease_holder(kube: k8s.ApiClient) -> str:
    lease = await k8s.CoordinationV1Api(kube).read_namespaced_lease(LEASE[1], LEASE[0])
    return str(lease.spec.holder_identity or "")


async def wait_for_holder(kube: k8s.ApiClient, among: set[str], timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while (holder := await lease_holder(kube)) not in among:
        if time.monotonic() > deadline:
            raise TimeoutError(f"no replica of {sorted(among)} took the lease (held by {holder!r})")
        await asyncio.sleep(0.1)
    return holder


async def start(
    http: httpx.AsyncClient, url: str, headers: dict[str, str], spec: str
) -> str | None:
    """One start through a gateway: the instance's id if acknowledged (202), else None."""
    try:
        response = await http.post(
            f"{url}/v1/gpu-instances", json={"image": "busybox", "specName": spec}, headers=headers
        )
    except httpx.TransportError:
        return None
    return str(response.json()["instanceID"]) if response.status_code == 202 else None


async def burst_with_a_leader_kill(
    kube: k8s.ApiClient, replicas: tuple[Replica, Replica], headers: dict[str, str], spec: str,
    starts: int,
) -> tuple[list[str], float, Replica]:  # fmt: skip
    """`starts` starts through both gateways, the leader killed after half: (the
    acknowledged ids, seconds from the kill to the other replica leading, the survivor)."""
    by_name = {replica.name: replica for replica in replicas}
    leader = by_name[await wait_for_holder(kube, set(by_name), timeout_s=60)]
    survivor = next(replica for replica in replicas if replica is not leader)
    acknowledged: list[str] = []
    async with httpx.AsyncClient(timeout=30) as http:

        async def one(index: int) -> None:
            replica = replicas[index % 2]
            if (instance := await start(http, replica.url, headers, spec)) is not None:
                acknowledged.append(instance)

        first = [asyncio.create_task(one(index)) for index in range(starts // 2)]
        await asyncio.sleep(0.05)
        leader.kill()
        killed = time.monotonic()
        await asyncio.gather(*first, *(one(index) for index in range(starts // 2, starts)))
        await wait_for_holder(kube, {survivor.name}, timeout_s=LEASE_DURATION_S * 4)
        takeover_s = time.monotonic() - killed
    return acknowledged, takeover_s, survivor


async def all_running(
    http: httpx.AsyncClient, url: str, headers: dict[str, str], ids: list[str], timeout_s: float
) -> float:
    """Seconds until every one of `ids` is running, read through `url`."""
    started = time.monotonic()
    pending = set(ids)
    while pending:
        if time.monotonic() - started > timeout_s:
            raise TimeoutError(
                f"{len(pending)} acknowledged starts never ran: {sorted(pending)[:5]}"
            )
        for instance_id in list(pending):
            got = await http.get(f"{url}/v1/gpu-instances/{instance_id}", headers=headers)
            if got.status_code == 200 and got.json()["state"] == "running":
                pending.discard(instance_id)
        await asyncio.sleep(0.2)
    return time.monotonic() - started


def parser() -> argparse.ArgumentParser:
    bench = argparse.ArgumentParser(prog="python -m bench failover", description=__doc__)
    bench.add_argument("--starts", type=int, default=40)
    return bench


async def main(args: argparse.Namespace) -> None:
    env = stack_env()
    admin = {"Authorization": f"Bearer {env['GPUCLOUD_BOOTSTRAP_ADMIN_KEY']}"}
    kube = await kube_client(env)
    async with httpx.AsyncClient(base_url="http://127.0.0.1:8000", timeout=30) as http:
        _, headers = await bench_tenant(
            http, admin, "failover", max_gpus=args.starts, max_instances=args.starts
        )
        spec = f"failover-{os.urandom(3).hex()}"
        body: dict[str, Any] = {"name": spec, "cpu": "1", "memory": "1Gi",
                                "gpuType": "NVIDIA-H100-80GB-HBM3", "gpuNum": 1}  # fmt: skip
        (await http.post("/v1/specs", json=body, headers=admin)).raise_for_status()
        await asyncio.sleep(2)  # the tenant reaches the instances service by event
    try:
        async with two_replicas() as replicas, httpx.AsyncClient(timeout=30) as http:
            acknowledged, takeover_s, survivor = await burst_with_a_leader_kill(
                kube, replicas, headers, spec, args.starts
            )
            running_s = await all_running(http, survivor.url, headers, acknowledged, 120)
            for instance_id in acknowledged:
                await http.delete(f"{survivor.url}/v1/gpu-instances/{instance_id}", headers=headers)
    finally:
        await kube.close()
    print(f"{len(acknowledged)}/{args.starts} starts acknowledged through two gateways; "
          f"leader killed after {args.starts // 2} were sent")  # fmt: skip
    print(f"  kill -> the other replica holds the lease: {takeover_s:.2f} s "
          f"(lease {LEASE_DURATION_S} s)")  # fmt: skip
    print(f"  then every acknowledged start running within {running_s:.2f} s")
