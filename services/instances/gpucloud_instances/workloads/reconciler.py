"""What every workload kind's reconciler stands on: the controller's machinery, the
requests and quota every kind answers to, and what a pod is given (its tenant's
namespace, its storages' credentials, its registry's pull secrets)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Generic, TypeVar

from faststream.kafka import KafkaBroker

from ..admission import workload_claimant
from ..controller.runtimes import ClusterRuntime, ClusterRuntimes
from ..controller.workqueue import WorkQueue
from ..documents import WorkloadDocFields, namespace_project
from ..queue.admissions import ADMIT, BORROW, Admissions
from ..queue.decision import Waiting
from ..quota_ledger import QuotaLedger
from ..registry.pull_secrets import PullSecrets
from ..storages import StorageClient, StorageRefused
from ..store import RequestStore
from ..tenancy.reconciler import ProjectGone
from ..tenancy.store import TenantStore
from ..wakeups import ADMISSION, WorkItem


@dataclass(frozen=True)
class ReconcilerParts:
    """The parts every kind's reconciler is built with, built once by the controller."""

    #: Each cluster's client, caches and tenant namespaces, by the workload's `cluster`.
    runtimes: ClusterRuntimes
    broker: KafkaBroker
    queue: WorkQueue
    requests: RequestStore
    quota: QuotaLedger
    storage: StorageClient
    pull_secrets: PullSecrets
    tenants: TenantStore
    #: The admission queue's pass, whose plan a queued workload follows.
    admissions: Admissions


DocT = TypeVar("DocT", bound=WorkloadDocFields)

#: How soon a workload whose cluster is not driven now is looked at again.
CLUSTER_RETRY_S = 5.0


class ClusterNotDriven(Exception):
    """The workload's cluster is not driven now (not answering, not listed yet, or
    deleted): its workload waits, as it is, until it is."""


class ClusterLost(Exception):
    """The workload's cluster has not answered for longer than the grace: the workload
    is given up, billed up to `since`, the first look that found it silent (decision 130)."""

    def __init__(self, cluster: str, since: datetime) -> None:
        super().__init__(cluster)
        self.cluster = cluster
        self.since = since

    @property
    def message(self) -> str:
        return f"cluster {self.cluster!r} stopped answering at {self.since.isoformat()}"


class WorkloadReconciler(Generic[DocT]):
    """The base of the instance, job and inference service reconcilers, over the kind's
    stored document: each kind adds its own store and steps."""

    #: Whether the kind's work may go past its project's share by what the project may
    #: borrow (batch jobs; decision 138).
    MAY_BORROW = False

    def __init__(self, parts: ReconcilerParts) -> None:
        self._admissions = parts.admissions
        self._runtimes = parts.runtimes
        self._broker = parts.broker
        self._queue = parts.queue
        self._requests = parts.requests
        self._quota = parts.quota
        self._storage = parts.storage
        self._pull_secrets = parts.pull_secrets
        self._tenants = parts.tenants

    def _cluster(self, doc: WorkloadDocFields) -> ClusterRuntime:
        """The runtime of the cluster the workload was placed in; `ClusterLost` once
        that cluster is lost, `ClusterNotDriven` while it is not driven or not synced
        (the reconcile is tried again later)."""
        since = self._runtimes.lost_since(doc.get("cluster"))
        if since is not None:
            raise ClusterLost(str(doc.get("cluster")), since)
        runtime = self._runtimes.of(doc.get("cluster"))
        if runtime is None:
            raise ClusterNotDriven(str(doc.get("cluster")))
        return runtime

    async def _claim_quota(
        self, doc: DocT, workload_id: str, gpus: int, *, borrowing: bool = False
    ) -> bool:
        """Whether the tenant is active and its quota, the limit of the user who
        started the workload and its project's share, take `gpus` for it (beyond the tenant's quota by what the
        tenant may borrow, when `borrowing`). The claim is the last word, whatever
        figures led here; the same claim counts once."""
        tenant_id = doc["tenant_id"]
        tenant = await self._tenants.get(tenant_id)
        if tenant is None or tenant["status"] != "active":
            return False
        quota = tenant["quota"].copy()
        if borrowing:
            quota["max_gpus"] += quota.get("borrow_gpus", 0)
        who = workload_claimant(tenant, doc, may_borrow=self.MAY_BORROW)
        claim = await self._quota.claim(tenant_id, workload_id, gpus, quota, who)
        return claim.admitted

    async def _namespace_ready(self, doc: DocT, cluster: ClusterRuntime) -> bool:
        """Whether the namespace the workload's pods go in is in place (made now if need
        be); False while its tenant is not known here yet, or once its project was
        deleted, when the workload is stopped as the deletion stops its project's work
        (a start that raced the deletion)."""
        try:
            return await cluster.tenant_namespaces.ensure(doc["tenant_id"], doc["namespace"])
        except ProjectGone:
            await self._project_gone(doc)
            return False

    async def _project_gone(self, doc: DocT) -> None:
        raise NotImplementedError

    async def _attach_storages(
        self, doc: DocT, workload_id: str, *, stay: int = 0
    ) -> list[tuple[str, str]] | None:
        """The (Secret, env prefix) pairs of the workload's object storages, in request
        order; None when the storage service refused them, which `_storage_refused`
        answers as the kind does (an instance or job fails, a service tries again)."""
        if not doc.get("storages"):
            return []
        runtime = self._cluster(doc)
        try:
            return await self._storage.attach(
                doc["tenant_id"], workload_id, doc["storages"], stay=stay,
                cluster=None if runtime.home else runtime.name, project=namespace_project(doc),
            )  # fmt: skip
        except StorageRefused as error:
            await self._storage_refused(doc, error)
            return None

    async def _storage_refused(self, doc: DocT, error: StorageRefused) -> None:
        raise NotImplementedError

    # --- the admission queue: one path for every kind that queues ---------------------

    async def _follow_plan(self, doc: DocT, item: WorkItem) -> None:
        """Carry out the admission pass's plan for a queued workload: admit it (its
        quota claimed; past the quota by what the tenant may borrow, for a borrower),
        or say why it waits."""
        planned = self._admissions.planned(item)
        if planned is None:
            self._queue.wake(ADMISSION)  # new here: the next pass places it
        elif planned in (ADMIT, BORROW):
            self._admissions.take(item)
            await self._admit(doc, borrowing=planned == BORROW)
        elif isinstance(planned, Waiting):
            await self._waits(doc, planned)

    async def _admit(self, doc: DocT, *, borrowing: bool) -> None:
        raise NotImplementedError

    async def _waits(self, doc: DocT, waiting: Waiting) -> None:
        raise NotImplementedError
