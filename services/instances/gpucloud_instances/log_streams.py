"""Pod logs for the API: instances' and job runs', read and followed on a Kubernetes
client of their own, so that tenants' reads never take a connection the controller
needs (review H4). A tenant follows at most `log_follows_per_tenant` logs at once
from this replica, and no follow outlives `log_follow_max_s`."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import AsyncGenerator, Awaitable, Callable

from gpucloud_libs.errors import DependencyUnavailable, NotFound, RateLimited
from gpucloud_libs.kube import KubeClient, NotFoundError

from .cluster_clients import ClusterClients, KubeconfigOf
from .settings import InstancesSettings

#: How often a followed log checks whether its workload has ended, and how long it
#: then waits for the last output before it closes.
END_CHECK_S = 2.0
DRAIN_S = 1.0


class LogStreams:
    def __init__(
        self, kubeconfig: str | None, *, home: str, kubeconfig_of: KubeconfigOf,
        per_tenant: int, max_follow_s: float,
    ) -> None:  # fmt: skip
        self._clusters = ClusterClients(KubeClient(kubeconfig), home, kubeconfig_of)
        self._per_tenant = per_tenant
        self._max_follow_s = max_follow_s
        self._following: Counter[str] = Counter()

    @classmethod
    def from_settings(cls, settings: InstancesSettings, kubeconfig_of: KubeconfigOf) -> LogStreams:
        return cls(
            settings.kubeconfig,
            home=settings.cluster_name,
            kubeconfig_of=kubeconfig_of,
            per_tenant=settings.log_follows_per_tenant,
            max_follow_s=settings.log_follow_max_s,
        )

    async def connect(self) -> None:
        await self._clusters.home.connect()

    async def close(self) -> None:
        await self._clusters.home.close()
        await self._clusters.close()

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
        as problems: `gone` when the pod no longer exists, 429 over the follow cap."""
        if follow:
            self._take_follow(tenant_id)
        try:
            kube = await self._clusters.of(cluster)
            stream = kube.pod_logs(
                namespace, pod, container="workload", follow=follow, tail_lines=tail_lines
            )
            try:
                first = await anext(stream, b"")
            except NotFoundError:
                raise NotFound(gone) from None
            except DependencyUnavailable:
                await self._clusters.forget(cluster)
                raise
        except BaseException:
            if follow:
                self._give_back_follow(tenant_id)
            raise
        chunks = _prepend(first, stream)
        if not follow:
            return chunks
        return self._followed(tenant_id, chunks, ended)

    def _take_follow(self, tenant_id: str) -> None:
        if self._following[tenant_id] >= self._per_tenant:
            raise RateLimited(
                f"this tenant already follows {self._per_tenant} logs, the most at once; "
                "close one, or read without follow",
                limit=self._per_tenant,
                retry_after_s=5,
            )
        self._following[tenant_id] += 1

    def _give_back_follow(self, tenant_id: str) -> None:
        self._following[tenant_id] -= 1
        if self._following[tenant_id] <= 0:
            del self._following[tenant_id]

    async def _followed(
        self, tenant_id: str, chunks: AsyncGenerator[bytes], ended: Callable[[], Awaitable[bool]]
    ) -> AsyncGenerator[bytes]:
        """`chunks` until the workload ends (then DRAIN_S without output) or the follow
        has lasted `log_follow_max_s`; the tenant's follow slot is returned either way,
        and when the reader goes away."""
        deadline = time.monotonic() + self._max_follow_s
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
            self._give_back_follow(tenant_id)
            next_chunk.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                await next_chunk
            await chunks.aclose()


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
