"""Pod logs for the API: instances' and job runs', read and followed on Kubernetes
clients of their own, so that tenants' reads never take a connection the controller
needs (review H4); follows and plain reads each on a pool of their own, so that a
flood of one leaves the other alone (review N8).

From one replica, a tenant follows at most `log_follows_per_tenant` logs at once,
each at most `log_follow_max_s`; and reads at most `log_reads_per_tenant` logs at
once without follow, each at most `log_read_max_bytes` (the start of what it asks
for: `tailLines` asks for the end) and `log_read_max_s`. Past a cap, a 429."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass

from gpucloud_libs.errors import DependencyUnavailable, NotFound, RateLimited
from gpucloud_libs.kube import KubeClient, NotFoundError

from .cluster_clients import ClusterClients, KubeconfigOf
from .settings import InstancesSettings

#: How often a followed log checks whether its workload has ended, and how long it
#: then waits for the last output before it closes.
END_CHECK_S = 2.0
DRAIN_S = 1.0


@dataclass(frozen=True)
class LogLimits:
    """What one replica gives a tenant's logs (the settings' `log_*`)."""

    follows_per_tenant: int = 4
    follow_max_s: float = 3600.0
    reads_per_tenant: int = 8
    read_max_s: float = 30.0
    read_max_bytes: int = 4 * 2**20


class LogStreams:
    def __init__(
        self, kubeconfig: str | None, *, home: str, kubeconfig_of: KubeconfigOf,
        limits: LogLimits,
    ) -> None:  # fmt: skip
        self._follows = ClusterClients(KubeClient(kubeconfig), home, kubeconfig_of)
        self._reads = ClusterClients(KubeClient(kubeconfig), home, kubeconfig_of)
        self._limits = limits
        self._following: Counter[str] = Counter()
        self._reading: Counter[str] = Counter()

    @classmethod
    def from_settings(cls, settings: InstancesSettings, kubeconfig_of: KubeconfigOf) -> LogStreams:
        limits = LogLimits(
            follows_per_tenant=settings.log_follows_per_tenant,
            follow_max_s=settings.log_follow_max_s,
            reads_per_tenant=settings.log_reads_per_tenant,
            read_max_s=settings.log_read_max_s,
            read_max_bytes=settings.log_read_max_bytes,
        )
        return cls(
            settings.kubeconfig, home=settings.cluster_name, kubeconfig_of=kubeconfig_of,
            limits=limits,
        )  # fmt: skip

    async def connect(self) -> None:
        await self._follows.home.connect()
        await self._reads.home.connect()

    async def close(self) -> None:
        for clients in (self._follows, self._reads):
            await clients.home.close()
            await clients.close()

    async def open(
        self,
        tenant_id: str,
        namespace: str,
        pod: str,
        *,
        cluster: str | None,
        follow: bool,
        tail_lines: int | None,
        gone: str,
        ended: Callable[[], Awaitable[bool]],
    ) -> AsyncGenerator[bytes]:
        """The `workload` container's log; with `follow`, as it grows until `ended()`
        says the workload is over (a kubelet closes the stream itself; kwok, or a
        kubelet restarting, may not). Errors come before the first byte, so they answer
        as problems: `gone` when the pod no longer exists, 429 over a cap."""
        held, clusters = (
            (self._following, self._follows) if follow else (self._reading, self._reads)
        )
        self._take(tenant_id, follow=follow)
        try:
            kube = await clusters.of(cluster)
            stream = kube.pod_logs(
                namespace, pod, container="workload", follow=follow, tail_lines=tail_lines,
                limit_bytes=None if follow else self._limits.read_max_bytes,
            )  # fmt: skip
            try:
                first = await anext(stream, b"")
            except NotFoundError:
                raise NotFound(gone) from None
            except DependencyUnavailable:
                await clusters.forget(cluster)
                raise
        except BaseException:
            _give_back(held, tenant_id)
            raise
        chunks = _prepend(first, stream)
        if not follow:
            return self._read(tenant_id, chunks)
        return self._followed(tenant_id, chunks, ended)

    def _take(self, tenant_id: str, *, follow: bool) -> None:
        held = self._following if follow else self._reading
        cap = self._limits.follows_per_tenant if follow else self._limits.reads_per_tenant
        if held[tenant_id] >= cap:
            what = "follows" if follow else "reads"
            instead = "close one, or read without follow" if follow else "wait for one to end"
            raise RateLimited(
                f"this tenant already {what} {cap} logs, the most at once; {instead}",
                limit=cap,
                retry_after_s=5,
            )
        held[tenant_id] += 1

    async def _read(self, tenant_id: str, chunks: AsyncGenerator[bytes]) -> AsyncGenerator[bytes]:
        """`chunks` until they end or `read_max_s` has passed; the tenant's read slot is
        given back either way, and when the reader goes away."""
        # A deadline checked per chunk, not a timeout around the yields: that would
        # cancel whatever the reader does between chunks.
        deadline = time.monotonic() + self._limits.read_max_s
        try:
            while (left := deadline - time.monotonic()) > 0:
                try:
                    chunk = await asyncio.wait_for(anext(chunks), timeout=left)
                except (StopAsyncIteration, TimeoutError):
                    return
                yield chunk
        finally:
            _give_back(self._reading, tenant_id)
            await chunks.aclose()

    async def _followed(
        self, tenant_id: str, chunks: AsyncGenerator[bytes], ended: Callable[[], Awaitable[bool]]
    ) -> AsyncGenerator[bytes]:
        """`chunks` until the workload ends (then DRAIN_S without output) or the follow
        has lasted `log_follow_max_s`; the tenant's follow slot is returned either way,
        and when the reader goes away."""
        deadline = time.monotonic() + self._limits.follow_max_s
        over = False
        next_chunk = asyncio.ensure_future(anext(chunks))
        try:
            while (left := deadline - time.monotonic()) > 0:
                wait = min(left, DRAIN_S if over else END_CHECK_S)
                done, _ = await asyncio.wait({next_chunk}, timeout=wait)
                if next_chunk in done:
                    try:
                        chunk = next_chunk.result()
                    except StopAsyncIteration:
                        return
                    yield chunk
                    next_chunk = asyncio.ensure_future(anext(chunks))
                elif over:
                    return
                else:
                    over = await ended()
        finally:
            _give_back(self._following, tenant_id)
            next_chunk.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                await next_chunk
            await chunks.aclose()


def _give_back(held: Counter[str], tenant_id: str) -> None:
    held[tenant_id] -= 1
    if held[tenant_id] <= 0:
        del held[tenant_id]


async def _prepend(first: bytes, rest: AsyncGenerator[bytes]) -> AsyncGenerator[bytes]:
    """`first`, then the rest of the stream, which is closed (its connection given back)
    however the reading ends."""
    try:
        if first:
            yield first
        async for chunk in rest:
            yield chunk
    finally:
        await rest.aclose()
