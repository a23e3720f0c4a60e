"""Gateway overhead: an authenticated call through the gateway against the same call
made straight to the service, side by side in one run.

The call is `GET /gpu-instances/{id}` of a tenant's instance (identity check, one
read by `_id`). Through the gateway it carries an API key; straight to the
instances service, the signed identity the gateway would add. A dedicated
gateway process is started for the run, pinned to one core (`taskset`), with
the load generator on the other; the instances service and the database are
shared by both paths. The gateway's own rate limits are lifted for it.

Figures:
  latency     one request at a time: p50 / p99
  throughput  32 in flight for a fixed time: requests/s
  gateway-only  GET /v1/whoami (authentication, no upstream): the gateway's ceiling
  clients     the direct call with aiohttp against httpx, 32 in flight: why the
              proxy uses aiohttp
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import aiohttp
import httpx

from gpucloud_libs.identity import IDENTITY_HEADER

from .common import TASKSET, gateway_signer, percentile, stack_env

BENCH_PORT = 8100
CONCURRENCY = 32

Call = Callable[[], Awaitable[int]]


@contextlib.contextmanager
def bench_gateway(env: dict[str, str]) -> Iterator[str]:
    """A gateway of its own on core 1, limits lifted, logging to a file."""
    process_env = {
        **os.environ,
        **env,
        "GPUCLOUD_HTTP_PORT": str(BENCH_PORT),
        "GPUCLOUD_KEY_RATE_LIMIT_PER_S": "1000000",
        "GPUCLOUD_KEY_RATE_LIMIT_BURST": "1000000",
        "GPUCLOUD_LOG_LEVEL": "WARNING",
    }
    log = Path(tempfile.gettempdir()) / "gpucloud-bench-gateway.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [TASKSET, "-c", "1", sys.executable, "-m", "gpucloud_gateway"],
            env=process_env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{BENCH_PORT}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError(f"the bench gateway did not start; see {log}")
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


async def latency(call: Call, count: int) -> list[float]:
    seconds = []
    for _ in range(count):
        started = time.perf_counter()
        status = await call()
        seconds.append(time.perf_counter() - started)
        assert status == 200, status
    return seconds


async def throughput(call: Call, duration_s: float) -> float:
    done = 0
    deadline = time.perf_counter() + duration_s

    async def worker() -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            assert await call() == 200
            done += 1

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return done / (time.perf_counter() - started)


def line(name: str, seconds: list[float]) -> str:
    ms = [s * 1000 for s in seconds]
    return f"{name:<14} n={len(ms):<5} p50={percentile(ms, 50):6.2f} ms  p99={percentile(ms, 99):6.2f} ms"


async def setup(env: dict[str, str], admin: dict[str, str]) -> tuple[str, str, str]:
    """A tenant with one (pending) instance: (tenant id, its admin key, instance id)."""
    tenant_id = f"bench-gw-{uuid.uuid4().hex[:8]}"
    async with httpx.AsyncClient(base_url=env["GPUCLOUD_GATEWAY_URL"], timeout=30) as http:
        created = await http.post(
            "/v1/tenants",
            json={"tenantID": tenant_id, "name": "bench", "limits": {"maxGpus": 64,
                  "maxInstances": 4, "maxStorageBytes": 0}, "rateLimit": {"requestsPerS": 100_000,
                  "burst": 1_000_000}, "admin": {"email": f"a@{tenant_id}.test", "name": "bench",
                  "role": "tenant-admin"}},
            headers=admin,
        )  # fmt: skip
        assert created.status_code == 201, created.text
        key = created.json()["adminKey"]["secret"]
        spec = f"bench-gw-{uuid.uuid4().hex[:6]}"
        made = await http.post(
            "/v1/specs",
            json={"name": spec, "cpu": "1", "memory": "1Gi", "gpuType": "BENCH-NONE", "gpuNum": 1},
            headers=admin,
        )
        assert made.status_code == 201, made.text
        while True:  # the tenant event reaches the instances service
            started = await http.post(
                "/v1/gpu-instances",
                json={"image": "pause", "specName": spec},
                headers={"Authorization": f"Bearer {key}"},
            )
            if started.status_code != 409:
                break
            await asyncio.sleep(0.2)
        assert started.status_code == 202, started.text
        return tenant_id, key, started.json()["instanceID"]


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench gateway", description=__doc__)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=10.0)
    return parser


async def main(args: argparse.Namespace) -> None:
    os.sched_setaffinity(0, {0})  # the load generator keeps to core 0
    env = stack_env()
    admin = {"Authorization": f"Bearer {env['GPUCLOUD_BOOTSTRAP_ADMIN_KEY']}"}
    tenant_id, key, instance_id = await setup(env, admin)
    signer = gateway_signer()
    path = f"/gpu-instances/{instance_id}"
    # What the gateway adds to each GET: a token good once. Minted before the clock
    # starts, so the direct path pays no signing and the comparison charges it all
    # to the gateway. Enough for every direct call the run makes, at up to 4,000/s.
    direct_calls = args.requests + 100 + int(3 * args.seconds * 4000)
    tokens = iter([
        signer.sign(
            subject="bench", role="tenant-admin", tenant_id=tenant_id,
            audience="instances", method="GET", path=path, ttl_s=3600,
        )
        for _ in range(direct_calls)
    ])  # fmt: skip

    def signed() -> dict[str, str]:
        return {IDENTITY_HEADER: next(tokens)}

    try:
        with bench_gateway(stack_env("gateway")) as gateway:
            connector = aiohttp.TCPConnector(limit=CONCURRENCY * 2)
            async with (
                aiohttp.ClientSession(connector=connector) as session,
                httpx.AsyncClient(limits=httpx.Limits(max_connections=CONCURRENCY * 2)) as hx,
            ):

                async def direct() -> int:
                    async with session.get(
                        env["GPUCLOUD_INSTANCES_URL"] + path, headers=signed()
                    ) as r:
                        await r.read()
                        return r.status

                async def proxied() -> int:
                    bearer = {"Authorization": f"Bearer {key}"}
                    async with session.get(f"{gateway}/v1{path}", headers=bearer) as r:
                        await r.read()
                        return r.status

                async def whoami() -> int:
                    bearer = {"Authorization": f"Bearer {key}"}
                    async with session.get(f"{gateway}/v1/whoami", headers=bearer) as r:
                        await r.read()
                        return r.status

                async def direct_httpx() -> int:
                    response = await hx.get(env["GPUCLOUD_INSTANCES_URL"] + path, headers=signed())
                    return response.status_code

                for call in (direct, proxied, whoami):  # warm connections and caches
                    await latency(call, 50)
                # Interleaved blocks, so drift in the shared stack hits both paths alike.
                direct_s: list[float] = []
                proxied_s: list[float] = []
                for _ in range(max(1, args.requests // 200)):
                    direct_s += await latency(direct, 200)
                    proxied_s += await latency(proxied, 200)
                whoami_s = await latency(whoami, args.requests)

                rates = {
                    "direct": await throughput(direct, args.seconds),
                    "via gateway": await throughput(proxied, args.seconds),
                    "gateway only": await throughput(whoami, args.seconds),
                    "direct aiohttp": await throughput(direct, args.seconds),
                    "direct httpx": await throughput(direct_httpx, args.seconds),
                }
    finally:
        async with httpx.AsyncClient(base_url=env["GPUCLOUD_GATEWAY_URL"], timeout=30) as http:
            await http.delete(f"/v1/tenants/{tenant_id}", headers=admin)

    p50_ratio = percentile(proxied_s, 50) / percentile(direct_s, 50)
    p99_ratio = percentile(proxied_s, 99) / percentile(direct_s, 99)
    print("latency, one request at a time (GET /gpu-instances/{id}):")
    print(" ", line("direct", direct_s))
    print(" ", line("via gateway", proxied_s))
    print(" ", line("gateway only", whoami_s), " (GET /v1/whoami: authentication, no upstream)")
    print(
        f"  overhead: p50 x{p50_ratio:.2f} (+{(percentile(proxied_s, 50) - percentile(direct_s, 50)) * 1000:.2f} ms), p99 x{p99_ratio:.2f}"
    )
    print(
        f"throughput, {CONCURRENCY} in flight for {args.seconds:g} s, gateway pinned to one core:"
    )
    for name, rate in rates.items():
        print(f"  {name:<15} {rate:8.0f} req/s")
    print(f"  via gateway / direct: x{rates['via gateway'] / rates['direct']:.2f}")
    print(f"  aiohttp / httpx client pools: x{rates['direct aiohttp'] / rates['direct httpx']:.2f}")
