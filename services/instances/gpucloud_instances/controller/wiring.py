"""The controller, wired: every reconciler built once, from the stores and clients the
app made, and handed to the leader."""

from __future__ import annotations

from collections.abc import Callable

from faststream.kafka import KafkaBroker

from gpucloud_libs.kube import KubeClient
from gpucloud_libs.kubeconfigs import registered_client

from ..clusters.service import Clusters
from ..inference.reconciler import InferenceReconciler
from ..instances.reconciler import InstanceReconciler
from ..jobs.reconciler import JobReconciler
from ..queue.admissions import Admissions
from ..registry.pull_secrets import PullSecrets
from ..settings import InstancesSettings
from ..stocks.reconciler import StockPool
from ..storages import StorageClient
from ..stores import Stores
from ..tenancy.reconciler import TenantReconciler
from ..wakeups import STOCKS
from ..workloads.reconciler import ReconcilerParts
from .cache import ClusterCache
from .leader import Controller, Reconcilers
from .lease import Lease
from .resync import Resync
from .runtimes import ClusterRuntime, ClusterRuntimes
from .workqueue import WorkQueue

#: Stock changes (claims, placeholders coming and going) are reconciled this long
#: after the last one, so refills run after a burst of starts, not during it.
STOCK_SETTLE_S = 0.5


def build_controller(
    settings: InstancesSettings,
    kube: KubeClient,
    broker: KafkaBroker,
    stores: Stores,
    *,
    storage: StorageClient,
    pull_secrets: PullSecrets,
    clusters: Clusters,
) -> Controller:
    tenants, instances, jobs, services, requests, quota = (
        stores.tenants, stores.instances, stores.jobs, stores.services, stores.requests,
        stores.quota,
    )  # fmt: skip
    queue = WorkQueue()

    def wake_stocks() -> None:
        queue.wake_soon(STOCKS, STOCK_SETTLE_S)

    runtimes = cluster_runtimes(settings, kube, queue, stores, wake_stocks)
    admissions = Admissions(runtimes, queue, jobs.holding, tenants, quota, stores.lines)
    instances.cache.observe(admissions.room.instance_written)
    parts = ReconcilerParts(
        runtimes=runtimes, broker=broker, queue=queue, requests=requests, quota=quota,
        storage=storage, pull_secrets=pull_secrets, tenants=tenants, admissions=admissions,
    )  # fmt: skip
    instance_reconciler = InstanceReconciler(
        parts, instances, schedule_timeout_s=settings.schedule_timeout_s
    )
    job_reconciler = JobReconciler(parts, jobs)
    inference_reconciler = InferenceReconciler(parts, services)
    resync = Resync(runtimes, queue, instances, jobs, services, quota, instance_reconciler)
    lease = Lease(
        kube,
        namespace=settings.lease_namespace,
        holder=settings.replica_id,
        duration_s=settings.lease_duration_s,
    )
    reconcilers = Reconcilers(
        instance_reconciler, job_reconciler, inference_reconciler,
        admissions, resync, clusters,
    )  # fmt: skip
    return Controller(settings, runtimes, lease, queue, stores, reconcilers)


def cluster_runtimes(
    settings: InstancesSettings, kube: KubeClient, queue: WorkQueue, stores: Stores,
    wake_stocks: Callable[[], None],
) -> ClusterRuntimes:  # fmt: skip
    """The home cluster's runtime, and how a registered cluster's is built."""

    def runtime(name: str, client: KubeClient, *, home: bool) -> ClusterRuntime:
        cache = ClusterCache(
            client, wake=queue.wake, wake_stocks=wake_stocks,
            node_lost_grace_s=settings.node_lost_grace_s,
        )  # fmt: skip
        stocks = StockPool(
            client, cache, stores.specs, stores.stocks,
            cluster=name, namespace=settings.stock_namespace, wake=wake_stocks,
        )  # fmt: skip
        return ClusterRuntime(
            name, home, client, cache,
            TenantReconciler(name, client, stores.tenants, settings, lazy=not home), stocks,
        )  # fmt: skip

    return ClusterRuntimes(
        runtime(settings.cluster_name, kube, home=True),
        lambda name, kubeconfig: runtime(name, registered_client(kubeconfig), home=False),
    )
