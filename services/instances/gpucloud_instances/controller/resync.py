"""The periodic resync: every live instance, orphan pod, tenant and stock against the cluster.

Watches can miss nothing that a relist would not bring back, but a crash can
leave work half done between the store and the cluster; this pass finds it.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from gpucloud_libs.clock import now
from gpucloud_libs.errors import DependencyUnavailable
from gpucloud_libs.kube import KubeError
from gpucloud_libs.naming import job_workload_id, service_workload_id

from ..inference.store import ServiceStore
from ..instances.reconciler import InstanceReconciler, delete_workload
from ..instances.store import InstanceStore
from ..jobs.store import JobStore
from ..lifecycle import TERMINAL, State, observe_pod
from ..quota_ledger import QuotaLedger
from ..store import instance_key
from ..wakeups import CLUSTERS, STOCKS, job_item, service_item, tenant_item
from .runtimes import ClusterRuntime, ClusterRuntimes
from .workqueue import WorkQueue

log = logging.getLogger(__name__)

#: An instance the API inserted but never admitted (it crashed in between) is dropped.
UNADMITTED_TTL = timedelta(minutes=2)


class Resync:
    def __init__(
        self,
        runtimes: ClusterRuntimes,
        queue: WorkQueue,
        instances: InstanceStore,
        jobs: JobStore,
        services: ServiceStore,
        quota: QuotaLedger,
        instance_reconciler: InstanceReconciler,
    ) -> None:
        self._runtimes = runtimes
        self._queue = queue
        self._instances = instances
        self._jobs = jobs
        self._services = services
        self._quota = quota
        self._instance_reconciler = instance_reconciler
        # Claims without a live instance at the last pass (see _release_finished_claims).
        self._orphan_claims: set[str] = set()

    async def run(self) -> None:
        """One pass. The comparison runs on the caches: only instances whose pod says
        something other than their stored state (or that have no pod, or still wait
        for a node) are queued, so a resync of thousands of settled instances costs a
        few queries, not thousands of reconciles."""
        live_jobs = await self._jobs.live_keys()
        services = await self._services.keys()
        starting = await self._instance_reconciler.pending_starts()
        live = await self._release_finished_claims(live_jobs, services, starting)
        self._wake_drifted(live)
        for key in starting:  # a start whose wake-up was lost (a new leader, say)
            self._instance_reconciler.wake_afresh(key)
        for key in live_jobs:
            self._queue.wake(job_item(key))
        for key in services:
            self._queue.wake(service_item(key))
        stale: set[str] = set()
        for runtime in self._runtimes:
            try:
                await self._delete_orphan_pods(runtime, live)
            except (KubeError, DependencyUnavailable) as error:
                # One cluster failing must not hold up the others, nor the passes below.
                log.warning(
                    "orphan pods not deleted", extra={"cluster": runtime.name, "error": str(error)}
                )
            stale.update(await runtime.tenant_namespaces.stale())
        for tenant_id in stale:
            self._queue.wake(tenant_item(tenant_id))
        for key in await self._instances.stale_unadmitted(now() - UNADMITTED_TTL):
            # Recorded before admission by an older version, which crashed in between.
            tenant_id, _, instance_id = key.partition("/")
            await self._quota.release(tenant_id, instance_id)
            await self._instances.remove(key)
        self._queue.wake(STOCKS)
        self._queue.wake(CLUSTERS)

    async def _release_finished_claims(
        self, live_jobs: list[str], services: list[str], starting: list[str]
    ) -> dict[str, State]:
        """Quota claims of instances, jobs and inference services that are no longer
        live; returns the live instances. (A job's own reconcile releases its claim once its last run ended;
        this pass catches one it missed.)

        Admission claims before it inserts the instance, so a claim without a live
        instance may be one a start is about to record. It is released only when a
        second pass still finds it so: by then its start has recorded the instance
        or died (a crash between terminal and release leaves such claims too)."""
        claims = [instance_key(*claim) for claim in await self._quota.claimed()]
        live = await self._instances.live_states()
        workloads = {
            instance_key(tenant, job_workload_id(job))
            for tenant, _, job in (k.partition("/") for k in live_jobs)
        } | {
            instance_key(tenant, service_workload_id(service))
            for tenant, _, service in (k.partition("/") for k in services)
        }
        # A stopped instance with a start still to do holds the claim its start made.
        held = workloads | set(starting)
        orphans = {key for key in claims if key not in live and key not in held}
        for key in orphans & self._orphan_claims:
            tenant_id, _, instance_id = key.partition("/")
            await self._quota.release(tenant_id, instance_id)
        self._orphan_claims = orphans - self._orphan_claims
        return live

    def _wake_drifted(self, live: dict[str, State]) -> None:
        at = now()
        pods = {key: (pod, runtime.cache) for runtime in self._runtimes
                for key, pod in runtime.cache.pods.items()}  # fmt: skip
        for key, state in live.items():
            pod, cache = pods.get(key, (None, None))
            if (
                pod is None
                or cache is None
                or state == State.PENDING
                or observe_pod(pod, node_ok=cache.pod_node_ok(pod), now=at).state != state
            ):
                self._instance_reconciler.wake_afresh(key)

    async def _delete_orphan_pods(self, runtime: ClusterRuntime, live: dict[str, State]) -> None:
        for key, pod in list(runtime.cache.pods.items()):
            if key in live or pod["metadata"].get("deletionTimestamp"):
                continue
            doc = await self._instances.get(key)
            if doc is None or State(doc["state"]) in TERMINAL:
                log.warning(
                    "deleting orphan pod",
                    extra={
                        "pod": pod["metadata"]["name"],
                        "instance": key,
                        "cluster": runtime.name,
                    },
                )
                await delete_workload(
                    runtime.kube, pod["metadata"]["namespace"], pod["metadata"]["name"]
                )
