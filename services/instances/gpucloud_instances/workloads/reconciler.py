"""What every workload kind's reconciler stands on: the controller's machinery, the
requests and quota every kind answers to, and what a pod is given (its tenant's
namespace, its storages' credentials, its registry's pull secrets)."""

from __future__ import annotations

from dataclasses import dataclass

from faststream.kafka import KafkaBroker

from gpucloud_libs.kube import KubeClient

from ..controller.cache import ClusterCache
from ..controller.workqueue import WorkQueue
from ..quota_ledger import QuotaLedger
from ..registry.pull_secrets import PullSecrets
from ..storages import StorageClient
from ..store import RequestStore
from ..tenancy.reconciler import TenantReconciler


@dataclass(frozen=True)
class WorkloadParts:
    """The parts every kind's reconciler is built with, built once by the controller."""

    kube: KubeClient
    broker: KafkaBroker
    cache: ClusterCache
    queue: WorkQueue
    requests: RequestStore
    quota: QuotaLedger
    tenant_namespaces: TenantReconciler
    storage: StorageClient
    pull_secrets: PullSecrets


class WorkloadReconciler:
    """The base of the instance, job and inference service reconcilers: each kind adds
    its own store and steps."""

    def __init__(self, parts: WorkloadParts) -> None:
        self._kube = parts.kube
        self._broker = parts.broker
        self._cache = parts.cache
        self._queue = parts.queue
        self._requests = parts.requests
        self._quota = parts.quota
        self._tenant_namespaces = parts.tenant_namespaces
        self._storage = parts.storage
        self._pull_secrets = parts.pull_secrets
