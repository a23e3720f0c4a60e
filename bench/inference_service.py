"""Inference services: a service URL balancing 4 replicas against the same load sent
straight to one replica, side by side in one run; and a load spike's time to a new
replica serving.

Four kwok GPU nodes of their own give the replicas loopback addresses, on which
this process serves each replica (a small aiohttp app). A dedicated gateway
(pinned to core 1, limits lifted) serves the service URL; the load generator
keeps to core 0.

Figures:
  latency     one request at a time: p50 / p99, and the proxy's overhead per request
  throughput  32 in flight for a fixed time: requests/s
  spike       a service at 1 replica (autoscaling on requests in flight, target 1,
              at most 2) gets 4 slow requests at once: seconds until a request is
              answered by the second replica
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import httpx
from aiohttp import web
from kubernetes_asyncio import client as k8s

from gpucloud_libs.naming import SERVICE_LABEL, tenant_namespace
from gpucloud_stack import fleet

from .common import bench_tenant, kube_client, percentile, stack_env
from .gateway_overhead import CONCURRENCY, bench_gateway, latency, line, throughput

PORT = 18_090
NODES = 4
SLOW_S = 0.5


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench inference", description=__doc__)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=10.0)
    return parser


async def _replica(address: str) -> web.AppRunner:
    async def hello(_: web.Request) -> web.Response:
        return web.json_response({"replica": address})

    async def slow(_: web.Request) -> web.Response:
        await asyncio.sleep(SLOW_S)
        return web.json_response({"replica": address})

    app = web.Application()
    app.add_routes([web.get("/", hello), web.get("/slow", slow)])
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, address, PORT).start()
    return runner


@contextlib.asynccontextmanager
async def _serving(kube: k8s.ApiClient, namespace: str) -> AsyncIterator[dict[str, float]]:
    """Serve every replica of the namespace's services as it appears: yields when each
    address started serving (time.perf_counter())."""
    core = k8s.CoreV1Api(kube)
    runners: dict[str, web.AppRunner] = {}
    started: dict[str, float] = {}

    async def follow() -> None:
        while True:
            pods = await core.list_namespaced_pod(namespace, label_selector=SERVICE_LABEL)
            for pod in pods.items:
                address = pod.status.pod_ip
                if address and address not in runners and not pod.metadata.deletion_timestamp:
                    runners[address] = await _replica(address)
                    started[address] = time.perf_counter()
            await asyncio.sleep(0.05)

    task = asyncio.create_task(follow())
    try:
        yield started
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        for runner in runners.values():
            await runner.cleanup()


async def _service(
    http: httpx.AsyncClient, key: str, spec: str, body: dict[str, Any], ready: int
) -> str:
    """Create the service; wait until `ready` replicas serve. Its host."""
    headers = {"Authorization": f"Bearer {key}"}
    created = await http.post(
        "/v1/inference-services",
        json={"image": "bench/llm:1", "specName": spec, "port": PORT, **body},
        headers=headers,
    )
    assert created.status_code == 201, created.text
    path = f"/v1/inference-services/{created.json()['serviceID']}"
    for _ in range(600):
        got = (await http.get(path, headers=headers)).json()
        if got["state"] == "ready" and got["readyReplicas"] == ready:
            return urlsplit(str(created.json()["url"])).netloc
        await asyncio.sleep(0.1)
    raise RuntimeError(f"the service did not get {ready} ready replicas: {got}")


async def main(args: argparse.Namespace) -> None:
    os.sched_setaffinity(0, {0})  # the load generator keeps to core 0
    env = stack_env()
    admin = {"Authorization": f"Bearer {env['GPUCLOUD_BOOTSTRAP_ADMIN_KEY']}"}
    kube = await kube_client(env)
    core = k8s.CoreV1Api(kube)
    product, base = f"BENCH-SVC-{uuid.uuid4().hex[:6]}", random.randint(100, 240)
    nodes = [f"bench-svc-{uuid.uuid4().hex[:8]}" for _ in range(NODES)]
    for index, name in enumerate(nodes):
        node: Any = fleet.gpu_node(
            name, product=product, gpus=2, zone=f"zone-{'ab'[index % 2]}", cpu="32",
            memory="256Gi", pod_cidr=f"127.{base}.{index + 10}.0/24",
        )  # fmt: skip
        await core.create_node(node)
    http = httpx.AsyncClient(base_url=env["GPUCLOUD_GATEWAY_URL"], timeout=60)
    tenant_id = ""
    try:
        tenant_id, headers = await bench_tenant(
            http, admin, "bench-svc", max_gpus=16, max_instances=4
        )
        key = headers["Authorization"].removeprefix("Bearer ")
        spec = f"bench-svc-{uuid.uuid4().hex[:6]}"
        made = await http.post(
            "/v1/specs",
            json={"name": spec, "cpu": "1", "memory": "1Gi", "gpuType": product, "gpuNum": 1},
            headers=admin,
        )
        assert made.status_code == 201, made.text
        await asyncio.sleep(2)  # the tenant event reaches the instances service
        async with _serving(kube, tenant_namespace(tenant_id)) as started:
            host = await _service(http, key, spec, {"minReplicas": 4}, ready=4)
            while len(started) < 4:
                await asyncio.sleep(0.05)
            one_replica = next(iter(started))
            await _compare(args, env, key, host, one_replica)
            await _spike(env, http, key, spec, started)
    finally:
        if tenant_id:
            await http.delete(f"/v1/tenants/{tenant_id}", headers=admin)
        await http.aclose()
        for name in nodes:
            with contextlib.suppress(k8s.ApiException):
                await core.delete_node(name)
        await kube.close()


async def _compare(
    args: argparse.Namespace, env: dict[str, str], key: str, host: str, replica: str
) -> None:
    through = {"Authorization": f"Bearer {key}", "Host": host}
    with bench_gateway(stack_env("gateway")) as gateway:
        connector = aiohttp.TCPConnector(limit=CONCURRENCY * 2)
        async with aiohttp.ClientSession(connector=connector) as session:

            async def direct() -> int:
                async with session.get(f"http://{replica}:{PORT}/") as answer:
                    await answer.read()
                    return answer.status

            async def proxied() -> int:
                async with session.get(f"{gateway}/", headers=through) as answer:
                    await answer.read()
                    return answer.status

            for call in (direct, proxied):  # warm connections and caches
                await latency(call, 50)
            direct_s: list[float] = []
            proxied_s: list[float] = []
            for _ in range(max(1, args.requests // 200)):  # interleaved against drift
                direct_s += await latency(direct, 200)
                proxied_s += await latency(proxied, 200)
            rates = {
                "one replica, direct": await throughput(direct, args.seconds),
                "service URL, 4 replicas": await throughput(proxied, args.seconds),
            }
    overhead = (percentile(proxied_s, 50) - percentile(direct_s, 50)) * 1000
    overhead_99 = (percentile(proxied_s, 99) - percentile(direct_s, 99)) * 1000
    print("latency, one request at a time (GET / of a small JSON answer):")
    print(" ", line("direct", direct_s), " (straight to one replica)")
    print(" ", line("service URL", proxied_s), " (gateway: key, host, balancer, proxy)")
    print(f"  proxy overhead per request: +{overhead:.2f} ms at p50, +{overhead_99:.2f} ms at p99")
    print(
        f"throughput, {CONCURRENCY} in flight for {args.seconds:g} s, gateway pinned to one core:"
    )
    for name, rate in rates.items():
        print(f"  {name:<24} {rate:8.0f} req/s")
    ratio = rates["service URL, 4 replicas"] / rates["one replica, direct"]
    print(f"  service URL / direct: x{ratio:.2f}")


async def _spike(
    env: dict[str, str], http: httpx.AsyncClient, key: str, spec: str, started: dict[str, float]
) -> None:
    body = {"minReplicas": 1, "maxReplicas": 2,
            "autoscaling": {"targetInFlight": 1, "scaleDownDelaySeconds": 60}}  # fmt: skip
    before = set(started)
    host = await _service(http, key, spec, body, ready=1)
    while not set(started) - before:
        await asyncio.sleep(0.05)
    first = next(iter(set(started) - before))
    through = {"Authorization": f"Bearer {key}", "Host": host}
    async with httpx.AsyncClient(base_url=env["GPUCLOUD_GATEWAY_URL"], timeout=60) as client:
        spike_at = time.perf_counter()
        served_by_new: float | None = None

        async def worker() -> None:
            nonlocal served_by_new
            while served_by_new is None and time.perf_counter() - spike_at < 60:
                answer = await client.get("/slow", headers=through)
                if answer.json()["replica"] != first and served_by_new is None:
                    served_by_new = time.perf_counter() - spike_at

        await asyncio.gather(*(worker() for _ in range(4)))
    if served_by_new is None:
        print("spike: no second replica served within 60 s")
        return
    print(
        f"spike: 4 slow requests ({SLOW_S:g} s each) at once on 1 replica (target 1 in flight): "
        f"the second replica answered {served_by_new:.2f} s after the spike began"
    )
