"""The controller: while this replica holds the lease, it runs the caches, the workers and
the periodic passes, and routes each work item to its reconciler."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from gpucloud_libs.errors import DependencyUnavailable
from gpucloud_libs.kube import KubeError

from ..clusters.service import Clusters
from ..documents import InstanceDoc
from ..inference.reconciler import InferenceReconciler
from ..instances.reconciler import InstanceReconciler
from ..jobs.reconciler import JobReconciler
from ..queue.admissions import Admissions
from ..settings import InstancesSettings
from ..stores import Stores
from ..wakeups import CLUSTERS, ItemKind, WorkItem, instance_item, job_item, service_item
from ..workloads.reconciler import CLUSTER_RETRY_S, ClusterNotDriven
from .lease import Lease, LeaseLost
from .resync import Resync
from .runtimes import ClusterRuntimes
from .workqueue import WorkQueue

log = logging.getLogger(__name__)

WAKEUP_POLL_S = 0.2
RETRY_LEAD_S = 2.0


@dataclass(frozen=True)
class Reconcilers:
    """Who acts on each kind of work item, and the periodic passes."""

    instances: InstanceReconciler
    jobs: JobReconciler
    inference: InferenceReconciler
    admissions: Admissions
    resync: Resync
    clusters: Clusters


class Controller:
    """Wired in app.py from the parts below; each part gets only what it uses."""

    def __init__(
        self,
        settings: InstancesSettings,
        runtimes: ClusterRuntimes,
        lease: Lease,
        queue: WorkQueue,
        stores: Stores,
        reconcilers: Reconcilers,
    ) -> None:
        self._settings = settings
        self._runtimes = runtimes
        self._home = runtimes.home
        self._lease = lease
        self._queue = queue
        self._instances = stores.instances
        self._jobs = stores.jobs
        self._services = stores.services
        self._requests = stores.requests
        self._lines = stores.lines
        self._stocks = stores.stocks
        self._instance_reconciler = reconcilers.instances
        self._job_reconciler = reconcilers.jobs
        self._inference_reconciler = reconcilers.inference
        self._admissions = reconcilers.admissions
        self._resync = reconcilers.resync
        self._clusters = reconcilers.clusters
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="instances-controller")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._lease.release()

    def wake(self, item: WorkItem) -> bool:
        """Reconcile `item` soon; only the leader acts (False elsewhere), and other
        replicas' API calls reach it through the store. The caller changed the store:
        an instance's remembered document is stale."""
        if item.kind is ItemKind.INSTANCE:
            return self._instance_reconciler.wake_afresh(item.key)
        return self._queue.wake(item)

    def wake_new(self, doc: InstanceDoc) -> bool:
        """`wake` for an instance the API has just inserted, as inserted: it has no
        stop request yet, so the controller need not read either."""
        if not self._queue.accepting:
            return False
        self._instance_reconciler.handed(doc)
        return self._queue.wake(instance_item(doc["_id"]))

    async def handle(self, item: WorkItem) -> None:
        """Route one work item to its reconciler; nothing while the lease is stale (the
        renewal loop ends this lead within a second, and a new lead resyncs all)."""
        if not self._lease.fresh():
            return
        try:
            await self._route(item)
        except ClusterNotDriven as error:
            log.info(
                "its cluster is not driven now; waiting",
                extra={"item": str(item), "cluster": str(error)},
            )
            self._queue.wake_later(CLUSTER_RETRY_S, item)

    async def _route(self, item: WorkItem) -> None:
        match item.kind:
            case ItemKind.INSTANCE:
                await self._instance_reconciler.reconcile(item.key)
            case ItemKind.JOB:
                await self._job_reconciler.reconcile(item.key)
            case ItemKind.SERVICE:
                await self._inference_reconciler.reconcile(item.key)
            case ItemKind.TENANT:
                for runtime in self._runtimes:
                    await runtime.tenant_namespaces.reconcile(item.key)
            case ItemKind.STOCKS:
                await self._reconcile_stocks()
            case ItemKind.ADMISSION:
                await self._admissions.plan()
            case ItemKind.CLUSTERS:
                await self._clusters.look_all(self._runtimes)

    async def _reconcile_stocks(self) -> None:
        """Every driven cluster's stocks, from one read of the targets; one cluster that
        fails them leaves the others' done (the next resync tries it again)."""
        targets, images = await asyncio.gather(self._stocks.targets(), self._stocks.images())
        for runtime in self._runtimes:
            if runtime.home:
                await runtime.stocks.reconcile(targets, images)
                continue
            try:
                await runtime.stocks.reconcile(targets, images)
            except (KubeError, DependencyUnavailable) as error:
                log.warning(
                    "a cluster's warm stocks failed; trying again at the next resync",
                    extra={"cluster": runtime.name, "error": str(error)},
                )

    async def _run(self) -> None:
        while True:
            try:
                if await self._lease.acquire():
                    log.info(
                        "became controller leader", extra={"replica": self._settings.replica_id}
                    )
                    self._queue.accepting = True
                    try:
                        await self._lead()
                    except BaseExceptionGroup as group:
                        # The lead's task groups end with what ended them: say that.
                        raise _sole(group) from None
            except LeaseLost:
                log.warning("lost the controller lease")
            except (KubeError, DependencyUnavailable) as error:
                log.warning("controller interrupted; retrying", extra={"error": str(error)})
            except Exception:
                log.exception("controller crashed; restarting")
            finally:
                self._queue.accepting = False
                self._instance_reconciler.reset()
                self._home.stocks.reset()
                self._home.cache.reset()
                self._admissions.reset()
                await self._runtimes.close_all()
            await asyncio.sleep(RETRY_LEAD_S)

    async def _lead(self) -> None:
        await self._home.prepare()
        async with asyncio.TaskGroup() as group:
            group.create_task(self._lease.renew_forever())
            group.create_task(self._home.watch())
            await self._home.cache.synced.wait()
            queued_jobs, admitted_jobs, queued_instances, published = await asyncio.gather(
                self._jobs.all_queued(), self._jobs.admitted(), self._instances.all_queued(),
                self._lines.tenants(),
            )  # fmt: skip
            self._admissions.fill([*queued_jobs, *admitted_jobs], queued_instances, published)
            for index in range(self._settings.reconcile_workers):
                group.create_task(self._queue.work(index, self.handle))
            # Transitions publish inline; these are the ones a crash left unpublished.
            for key in await self._instances.keys_with_outbox():
                self._queue.wake(instance_item(key))
            for key in await self._jobs.keys_with_outbox():
                self._queue.wake(job_item(key))
            for key in await self._services.keys_with_outbox():
                self._queue.wake(service_item(key))
            self._queue.wake(CLUSTERS)  # drive the registered clusters
            group.create_task(_every(WAKEUP_POLL_S, self._poll_wakeups, self._lease))
            group.create_task(
                _every(self._settings.resync_interval_s, self._resync.run, self._lease)
            )

    async def _poll_wakeups(self) -> None:
        """Other replicas' API calls wake the leader through inserted documents."""
        for stored in await self._requests.take_wakeups():
            self.wake(WorkItem.parse(stored))


async def _every(interval_s: float, job: Callable[[], Awaitable[None]], lease: Lease) -> None:
    """Run `job` every `interval_s` for as long as this replica leads (not while its
    lease is stale: the renewal loop is about to end the lead)."""
    while True:
        try:
            if lease.fresh():
                await job()
        except (KubeError, DependencyUnavailable) as error:
            log.warning("periodic job failed", extra={"job": job.__qualname__, "error": str(error)})
        await asyncio.sleep(interval_s)


def _sole(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The one exception nested groups hold (the group itself when there are more)."""
    error: BaseException = group
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error
