"""The reconcile loop: makes Kubernetes match the store, and records what it observes.

Shared machinery, one job each: `lease` (one replica acts at a time), `cache`
(list+watch of pods and nodes), `workqueue` (each item reconciled by one worker
at a time). Reconcilers, one file each, get only what they use: `tenants`
(namespaces), `instances` (pods and transitions), `stocks` (warm pools),
`admissions` (the admission queue's pass over queued jobs and instances), `jobs`
(batch jobs), `inference` (inference services' Deployments
and replicas), `nodes` (cordons from node health) and `resync` (the periodic pass).
`leader` runs them while the lease is held.
"""

from __future__ import annotations

from faststream.kafka import KafkaBroker

from gpucloud_libs.kube import KubeClient

from ..inference.reconciler import InferenceReconciler
from ..instances.reconciler import InstanceReconciler
from ..jobs.reconciler import JobReconciler
from ..queue.admissions import Admissions
from ..queue.store import QueueLineStore
from ..quota_ledger import QuotaLedger
from ..registry.pull_secrets import PullSecrets
from ..settings import InstancesSettings
from ..specs.store import SpecStore
from ..stocks.reconciler import StockPool
from ..stocks.store import StockStore
from ..storages import StorageClient
from ..store import InstanceStore, JobStore, RequestStore, ServiceStore
from ..tenancy.reconciler import TenantReconciler
from ..tenancy.store import TenantStore
from ..wakeups import STOCKS, InstanceChanges
from ..workloads.reconciler import WorkloadParts
from .cache import ClusterCache
from .leader import Controller
from .lease import Lease
from .nodes import NodeCordons
from .resync import Resync
from .workqueue import WorkQueue

__all__ = ["Controller", "NodeCordons", "build_controller"]

#: Stock changes (claims, placeholders coming and going) are reconciled this long
#: after the last one, so refills run after a burst of starts, not during it.
STOCK_SETTLE_S = 0.5


def build_controller(
    settings: InstancesSettings,
    kube: KubeClient,
    broker: KafkaBroker,
    *,
    specs: SpecStore,
    tenants: TenantStore,
    instances: InstanceStore,
    jobs: JobStore,
    services: ServiceStore,
    stocks: StockStore,
    requests: RequestStore,
    quota: QuotaLedger,
    changes: InstanceChanges,
    storage: StorageClient,
    pull_secrets: PullSecrets,
    lines: QueueLineStore,
) -> Controller:
    queue = WorkQueue()

    def wake_stocks() -> None:
        queue.wake_soon(STOCKS, STOCK_SETTLE_S)

    cache = ClusterCache(
        kube, wake=queue.wake, wake_stocks=wake_stocks, node_lost_grace_s=settings.node_lost_grace_s
    )
    tenant_namespaces = TenantReconciler(kube, tenants, settings)
    stock_pool = StockPool(
        kube, cache, specs, stocks, namespace=settings.stock_namespace, wake=wake_stocks
    )
    admissions = Admissions(cache, queue, jobs, instances, tenants, quota, lines)
    parts = WorkloadParts(
        kube, broker, cache, queue, requests, quota, tenant_namespaces, storage, pull_secrets
    )
    instance_reconciler = InstanceReconciler(
        parts, instances, changes, stock_pool, admissions, tenants,
        schedule_timeout_s=settings.schedule_timeout_s,
    )  # fmt: skip
    job_reconciler = JobReconciler(parts, jobs, tenants, admissions)
    inference_reconciler = InferenceReconciler(parts, services)
    return Controller(
        settings,
        kube,
        Lease(
            kube,
            namespace=settings.lease_namespace,
            holder=settings.replica_id,
            duration_s=settings.lease_duration_s,
        ),
        queue,
        cache,
        instances,
        jobs,
        services,
        requests,
        tenant_namespaces,
        instance_reconciler,
        job_reconciler,
        inference_reconciler,
        admissions,
        stock_pool,
        Resync(
            cache, queue, instances, jobs, services, quota, instance_reconciler, tenant_namespaces
        ),
    )
