"""One controller set per cluster, under the one leader: each cluster workloads run in
has its own client, watch caches and tenant namespaces (`ClusterRuntime`); the work
queue, the stores and the reconcilers are shared, since every key is global.

The home cluster's runtime is the service's own kubeconfig and lives as long as the
service; its watches are part of the leadership (the lease is in that cluster). Every
registered cluster's runtime is opened from its sealed kubeconfig when the leader
first sees it (the clusters pass, every resync and at the start of a lead), and
closed when it is deleted. A registered cluster's watches break and come back on
their own: a cluster that stops answering must not end the lead of the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from gpucloud_libs.clock import now
from gpucloud_libs.kube import ConflictError, KubeClient

from .. import manifests
from ..documents import InstanceDoc
from ..tenancy.reconciler import TenantReconciler
from .cache import ClusterCache

log = logging.getLogger(__name__)

#: A registered cluster whose watches broke is listed again after this.
WATCH_RETRY_S = 5.0


class WarmStocks(Protocol):
    """A cluster's warm stocks, as the controller drives them (stocks/reconciler.py)."""

    namespace: str

    def claim(self, doc: InstanceDoc) -> tuple[str, str] | None: ...

    async def reconcile(
        self,
        targets: Mapping[tuple[str, str], int],
        images: Mapping[tuple[str, str], list[str]],
    ) -> None: ...

    def available(self) -> dict[str, int]: ...

    def reset(self) -> None: ...


@dataclass
class ClusterRuntime:
    """What the controller drives one cluster with."""

    name: str
    home: bool
    kube: KubeClient
    cache: ClusterCache
    tenant_namespaces: TenantReconciler
    stocks: WarmStocks
    #: The registered cluster's watches, while this replica leads.
    _task: asyncio.Task[None] | None = field(default=None, repr=False)

    async def prepare(self) -> None:
        """What every workload's pods name (the priority classes), and the namespace of
        the cluster's warm stocks."""
        for priority_class in manifests.priority_classes():
            with contextlib.suppress(ConflictError):
                await self.kube.create(priority_class)
        await self.kube.ensure(manifests.namespace(self.stocks.namespace, {}))

    async def watch(self) -> None:
        """The cluster's four watches, until one of them fails."""
        async with asyncio.TaskGroup() as group:
            group.create_task(self.cache.watch_pods())
            group.create_task(self.cache.watch_nodes())
            group.create_task(self.cache.watch_jobs())
            group.create_task(self.cache.watch_job_sets())

    async def watch_forever(self) -> None:
        """`watch`, started again whenever the cluster stops answering (its workloads
        are reconciled once its cache is synced again)."""
        while True:
            try:
                await self.prepare()
                await self.watch()
            except* Exception as errors:  # whatever ended them, they are listed again
                log.warning(
                    "a cluster's watches broke; listing it again",
                    extra={"cluster": self.name, "error": str(errors.exceptions[0])},
                )
            self.cache.reset()
            await asyncio.sleep(WATCH_RETRY_S)

    @property
    def ready(self) -> bool:
        """Its caches hold the cluster as listed: its workloads can be reconciled."""
        return self.cache.synced.is_set()


#: Builds the runtime of a registered cluster from its kubeconfig (wiring.py).
RuntimeFactory = Callable[[str, dict[str, Any]], ClusterRuntime]


class ClusterRuntimes:
    """Every cluster's runtime, by name."""

    def __init__(self, home: ClusterRuntime, factory: RuntimeFactory) -> None:
        self.home = home
        self._factory = factory
        self._others: dict[str, ClusterRuntime] = {}
        #: Clusters lost (not answering past the grace), since their first silent look.
        self._lost: dict[str, datetime] = {}
        #: The registered clusters, once the clusters pass has read them.
        self._registered: set[str] | None = None
        #: Of the lost, those lost because they were deleted.
        self._gone: set[str] = set()

    def lost_since(self, cluster: str | None) -> datetime | None:
        """Since when a lost cluster has been silent (or, for one deleted, since it was
        found so); None while it is not lost."""
        return self._lost.get(cluster or self.home.name)

    def registered(self, names: set[str]) -> None:
        """The clusters registered now (the clusters pass): a workload recorded in one
        deleted since the last pass is given up as a lost one's. (One registered since
        waits for the next pass to be driven.)"""
        for gone in (self._registered or set()) - names:
            self._lost.setdefault(gone, now())
            self._gone.add(gone)
        for back in names & self._gone:  # registered again under its name
            self._gone.discard(back)
            self._lost.pop(back, None)
        self._registered = names

    def mark_lost(self, cluster: str, since: datetime) -> None:
        if cluster not in self._lost:
            log.warning(
                "cluster lost: its workloads fail, billed up to its first silent look",
                extra={"cluster": cluster, "since": since.isoformat()},
            )
        self._lost[cluster] = since

    def mark_answering(self, cluster: str) -> None:
        if self._lost.pop(cluster, None) is not None:
            log.info("cluster answers again", extra={"cluster": cluster})

    def of(self, cluster: str | None) -> ClusterRuntime | None:
        """The runtime of the cluster a workload was placed in (None, or the home
        cluster's, for a workload recorded before clusters were), when it is driven and
        its caches are synced; None otherwise (the workload waits for it)."""
        if not cluster or cluster == self.home.name:
            return self.home
        runtime = self._others.get(cluster)
        return runtime if runtime is not None and runtime.ready else None

    def __iter__(self) -> Iterator[ClusterRuntime]:
        """Every runtime whose caches are synced, the home cluster's first; a lost
        cluster's is not (its caches say what was, not what is)."""
        yield self.home
        yield from (
            runtime
            for runtime in self._others.values()
            if runtime.ready and runtime.name not in self._lost
        )

    def opened(self, cluster: str) -> ClusterRuntime | None:
        """A registered cluster's runtime, synced or not."""
        return self._others.get(cluster)

    def driven(self) -> set[str]:
        return {self.home.name, *self._others}

    async def open(self, name: str, kubeconfig: dict[str, Any]) -> None:
        """Start driving a registered cluster (the leader's, while it leads)."""
        if name in self._others:
            return
        runtime = self._factory(name, kubeconfig)
        try:
            await runtime.kube.connect()
        except Exception as error:  # the kubeconfig loader's errors are of many kinds
            log.warning(
                "a cluster's kubeconfig cannot be used",
                extra={"cluster": name, "error": str(error)},
            )
            await runtime.kube.close()
            return
        runtime._task = asyncio.create_task(runtime.watch_forever(), name=f"watch-{name}")
        self._others[name] = runtime
        log.info("driving cluster", extra={"cluster": name})

    async def close(self, name: str) -> None:
        """Stop driving a cluster that was deleted."""
        runtime = self._others.pop(name, None)
        if runtime is None:
            return
        if runtime._task is not None:
            runtime._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await runtime._task
        await runtime.kube.close()
        log.info("no longer driving cluster", extra={"cluster": name})

    async def close_all(self) -> None:
        """Leadership ended: the next lead opens them again."""
        for name in list(self._others):
            await self.close(name)
        self._lost.clear()
        self._registered = None
        self._gone.clear()
