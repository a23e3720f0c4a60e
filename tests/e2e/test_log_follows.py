"""Log reads and follows never starve the controller (review H4): they run on a
Kubernetes client of their own, a tenant follows at most 4 logs at once, and no
follow outlives its cap."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable

import httpx
import pytest

from gpucloud_instances.log_streams import LogLimits, LogStreams
from gpucloud_libs.errors import RateLimited
from gpucloud_libs.naming import tenant_namespace

from .clusters_support import HOME
from .conftest import stack_service_env
from .platform import Platform, TenantAccount, assert_problem, bearer
from .support import eventually

FOLLOWS = 70
PER_TENANT = 4


async def _running(platform: Platform, account: TenantAccount, spec: str) -> str:
    started = await platform.start_instance(account, {"image": "busybox", "specName": spec})
    assert started.status_code == 202, started.text
    instance_id = str(started.json()["instanceID"])

    async def running() -> bool:
        got = await platform.http.get(
            f"/v1/gpu-instances/{instance_id}", headers=bearer(account.admin_key)
        )
        return bool(got.json()["state"] == "running")

    await eventually(running, timeout=30, interval=0.2)
    return instance_id


@contextlib.asynccontextmanager
async def _follow(
    http: httpx.AsyncClient, path: str, headers: dict[str, str]
) -> AsyncIterator[httpx.Response]:
    async with http.stream("GET", path, params={"follow": "true"}, headers=headers) as response:
        yield response


async def test_seventy_follows_from_one_tenant_get_four_and_another_tenant_starts_as_usual(
    platform: Platform,
) -> None:
    spec = await platform.spec(gpus=1)
    noisy = await platform.tenant(rate_limit={"requestsPerS": 1000, "burst": 1000})
    other = await platform.tenant()
    instance_id = await _running(platform, noisy, spec)
    path = f"/v1/gpu-instances/{instance_id}/logs"
    headers = bearer(noisy.admin_key)

    async with contextlib.AsyncExitStack() as streams:

        async def follow() -> int:
            try:
                response = await streams.enter_async_context(_follow(platform.http, path, headers))
            except httpx.ReadTimeout:
                return 0
            if response.status_code != 200:
                await response.aread()
                problem = assert_problem(response, 429, "rate_limited")
                assert "already follows 4 logs" in problem["detail"], problem
                assert response.headers["Retry-After"] == "5"
            return response.status_code

        answers = await asyncio.gather(*(follow() for _ in range(FOLLOWS)))
        assert sorted(answers).count(200) == PER_TENANT, answers
        assert answers.count(429) == FOLLOWS - PER_TENANT, answers
        # The follows hold their streams open; another tenant's start is not held up.
        began = time.monotonic()
        await _running(platform, other, spec)
        assert time.monotonic() - began < 10
        # Reads without follow are not counted against the follows' cap.
        read = await platform.http.get(path, headers=headers)
        assert read.status_code == 200, read.text
    # Closed streams give their slots back.

    async def again() -> bool:
        async with _follow(platform.http, path, headers) as response:
            return response.status_code == 200

    await eventually(again, timeout=10)


async def _no_other_cluster(name: str) -> None:
    raise AssertionError(f"only the home cluster is read here, not {name!r}")


async def _never_ends() -> bool:
    return False


@contextlib.asynccontextmanager
async def _log_streams(limits: LogLimits) -> AsyncIterator[LogStreams]:
    """The instances service's log streams, as it reads the real API server's pod logs."""
    kubeconfig = stack_service_env("instances")["GPUCLOUD_KUBECONFIG"]
    streams = LogStreams(kubeconfig, home=HOME, kubeconfig_of=_no_other_cluster, limits=limits)
    await streams.connect()
    try:
        yield streams
    finally:
        await streams.close()


def _open(
    streams: LogStreams, account: TenantAccount, instance_id: str, *, follow: bool
) -> Awaitable[AsyncGenerator[bytes]]:
    return streams.open(
        account.tenant_id, tenant_namespace(account.tenant_id), f"inst-{instance_id}",
        cluster=HOME, follow=follow, tail_lines=None, gone="gone", ended=_never_ends,
    )  # fmt: skip


async def test_a_follow_ends_at_its_cap_and_gives_its_slot_back(
    platform: Platform, stack_env: dict[str, str]
) -> None:
    """Against the real API server's pod log, as the service reads it."""
    spec = await platform.spec(gpus=1)
    account = await platform.tenant()
    instance_id = await _running(platform, account, spec)
    async with _log_streams(LogLimits(follows_per_tenant=1, follow_max_s=1.5)) as streams:
        began = time.monotonic()
        chunks = await _open(streams, account, instance_id, follow=True)
        with pytest.raises(RateLimited, match="already follows 1 logs"):
            await _open(streams, account, instance_id, follow=True)
        received = b"".join([chunk async for chunk in chunks])
        assert received, "the simulated workload writes a log"
        assert 1.5 <= time.monotonic() - began < 5
        # The slot came back when the first ended.
        await (await _open(streams, account, instance_id, follow=True)).aclose()


async def test_plain_reads_are_capped_per_tenant_and_in_bytes(
    platform: Platform, stack_env: dict[str, str]
) -> None:
    """Review N8: reads without follow are counted too, on a pool of their own, and
    each is cut at its byte bound; another tenant reads meanwhile."""
    spec = await platform.spec(gpus=1)
    noisy, other = await platform.tenant(), await platform.tenant()
    noisy_instance = await _running(platform, noisy, spec)
    other_instance = await _running(platform, other, spec)
    async with _log_streams(LogLimits(reads_per_tenant=2, read_max_bytes=16)) as streams:
        held = [await _open(streams, noisy, noisy_instance, follow=False) for _ in range(2)]
        with pytest.raises(RateLimited, match="already reads 2 logs"):
            await _open(streams, noisy, noisy_instance, follow=False)
        theirs = await _open(streams, other, other_instance, follow=False)
        theirs_read = b"".join([chunk async for chunk in theirs])
        assert 0 < len(theirs_read) <= 16, theirs_read  # cut at the byte bound
        first = b"".join([chunk async for chunk in held[0]])
        assert 0 < len(first) <= 16, first
        # Its slot came back.
        await (await _open(streams, noisy, noisy_instance, follow=False)).aclose()
        await held[1].aclose()
