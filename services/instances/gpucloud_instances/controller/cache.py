"""List+watch caches of what the controller reconciles against: pods, nodes and Jobs.

Pods are sorted by what owns them: an instance, a warm stock, a job or an
inference service.

Each kind is listed, then watched from the list's resourceVersion; an expired
version relists. A change wakes the work item it concerns, so reconcilers read
observed state from here instead of calling the API server.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from gpucloud_libs.clock import now, now_as_stored
from gpucloud_libs.errors import DependencyUnavailable
from gpucloud_libs.kube import GoneError, KubeClient, Manifest, NotFoundError

from .. import manifests
from ..wakeups import WorkItem, instance_item, job_item, service_item
from .capacity import GpuAccounting, Workload, gpu_accounting, nodes_that_fit

log = logging.getLogger(__name__)

#: What the controller watches; a multi-node job is a JobSet (sigs.k8s.io/jobset).
KINDS = ("Pod", "Node", "Job", "JobSet")
#: How long to wait before looking again for a JobSet CRD that is not installed.
JOBSET_ABSENT_RETRY_S = 60.0
#: A watch the API server broke is relisted after this.
WATCH_RETRY_S = 1.0
_ENDED = frozenset({"Succeeded", "Failed"})
#: The event a relist's pods are replayed as: present, but not necessarily new.
LISTED = "LISTED"


@dataclass
class TrackedPod:
    """A pod of a batch job or of an inference service, kept after its deletion until
    its end (the end of its billing) is recorded."""

    pod: Manifest
    #: When the watch reported it deleted.
    gone_at: datetime | None = None
    #: When this process's watch first reported it: no run of it began before (None
    #: for a pod found by a list, which may be older than the process).
    seen_at: datetime | None = None

    @property
    def live(self) -> bool:
        """Still there and not ended: it holds (or waits to hold) its GPUs."""
        return self.gone_at is None and self.pod.get("status", {}).get("phase") not in _ENDED


class ClusterCache:
    def __init__(
        self,
        kube: KubeClient,
        *,
        wake: Callable[[WorkItem], object],
        wake_stocks: Callable[[], None],
        node_lost_grace_s: float,
    ) -> None:
        self._kube = kube
        self._wake = wake
        self._wake_stocks = wake_stocks
        self._node_lost_grace_s = node_lost_grace_s
        self.pods: dict[str, Manifest] = {}  # instance key -> pod
        self.stock_pods: dict[str, Manifest] = {}  # placeholder (unit) name -> pod
        self.stock_holds: dict[str, Manifest] = {}  # unit name -> its hold pod
        self.nodes: dict[str, Manifest] = {}
        self.jobs: dict[str, Manifest] = {}  # job key -> Kubernetes Job
        self.job_pods: dict[str, dict[str, TrackedPod]] = {}  # job key -> pod name -> pod
        #: inference service key -> pod name -> its replica's pod
        self.service_pods: dict[str, dict[str, TrackedPod]] = {}
        self.synced = asyncio.Event()
        self._synced_kinds: set[str] = set()

    def reset(self) -> None:
        """Forget the sync state: a new leadership term lists everything again."""
        self.synced.clear()
        self._synced_kinds.clear()

    async def watch_pods(self) -> None:
        await self._informer("Pod", f"{manifests.MANAGED}=true", self._on_pod)

    async def watch_nodes(self) -> None:
        await self._informer("Node", "", self._on_node)

    async def watch_jobs(self) -> None:
        await self._informer("Job", f"{manifests.MANAGED}=true", self._on_job)

    async def watch_job_sets(self) -> None:
        """Multi-node jobs' JobSets. A cluster without JobSet runs every other workload:
        its absence is logged, and the watch starts once the CRD is there."""
        while True:
            try:
                await self._informer("JobSet", f"{manifests.MANAGED}=true", self._on_job)
            except NotFoundError:
                log.warning("JobSet is not installed: multi-node jobs wait until it is")
                self._synced_kinds.add("JobSet")
                if self._synced_kinds >= set(KINDS):
                    self.synced.set()
                await asyncio.sleep(JOBSET_ABSENT_RETRY_S)

    async def _informer(
        self, kind: str, selector: str, on_event: Callable[[str, Manifest], None]
    ) -> None:
        """List, then watch from the list's resourceVersion; relist when it expires."""
        while True:
            items, version = await self._kube.list(kind, label_selector=selector)
            self._replace(kind, items)
            self._synced_kinds.add(kind)
            if self._synced_kinds >= set(KINDS):
                self.synced.set()
            try:
                while True:
                    async for event_type, obj in self._kube.watch(
                        kind, resource_version=version, label_selector=selector
                    ):
                        version = obj.get("metadata", {}).get("resourceVersion", version)
                        if event_type != "BOOKMARK":
                            on_event(event_type, obj)
            except GoneError:
                log.info("watch expired; relisting", extra={"kind": kind})
            except DependencyUnavailable as error:
                # The API server closed the stream midway (a restart, an overload):
                # what happened meanwhile comes with the relist.
                log.warning("watch broke; relisting", extra={"kind": kind, "error": str(error)})
                await asyncio.sleep(WATCH_RETRY_S)

    def _replace(self, kind: str, items: list[Manifest]) -> None:
        if kind == "Node":
            self.nodes = {node["metadata"]["name"]: node for node in items}
            return
        if kind in ("Job", "JobSet"):
            for key in [key for key, job in self.jobs.items() if job.get("kind") == kind]:
                del self.jobs[key]
            for job in items:
                self._on_job("ADDED", {"kind": kind, **job})  # list items omit their kind
            return
        self.pods.clear()
        self.stock_pods.clear()
        self.stock_holds.clear()
        self.job_pods.clear()
        self.service_pods.clear()
        for pod in items:
            self._on_pod(LISTED, pod)
        for key in list(self.pods):
            self._wake(instance_item(key))

    def _on_job(self, event_type: str, job: Manifest) -> None:
        """A job's Kubernetes object: its Job, or a multi-node job's JobSet."""
        key = _job_key(job)
        if key is None:
            return
        if event_type == "DELETED":
            self.jobs.pop(key, None)
        else:
            self.jobs[key] = job
        self._wake(job_item(key))

    def _on_job_pod(self, key: str, event_type: str, pod: Manifest) -> None:
        _track(self.job_pods.setdefault(key, {}), event_type, pod)
        self._wake(job_item(key))

    def forget_job_pod(self, key: str, name: str) -> None:
        """Its run's end is recorded: the deleted pod need not be kept."""
        _forget(self.job_pods, key, name)

    def forget_service_pod(self, key: str, name: str) -> None:
        """Its replica's end is recorded: the deleted pod need not be kept."""
        _forget(self.service_pods, key, name)

    def _on_pod(self, event_type: str, pod: Manifest) -> None:
        labels = pod.get("metadata", {}).get("labels", {})
        if manifests.STOCK in labels:
            name = pod["metadata"]["name"]
            pods = self.stock_pods
            if manifests.STOCK_HOLD in labels:
                pods, name = self.stock_holds, name.removesuffix(manifests.HOLD_SUFFIX)
            if event_type == "DELETED":
                pods.pop(name, None)
            else:
                pods[name] = pod
            self._wake_stocks()
            return
        if event_type != "DELETED" and _waits_for_a_node(pod):
            self._wake_stocks()  # a warm unit may have to make room for it
        job_key = _job_key(pod)
        if job_key is not None:
            self._on_job_pod(job_key, event_type, pod)
            return
        service_key = _service_key(pod)
        if service_key is not None:
            self._on_service_pod(service_key, event_type, pod)
            return
        tenant, instance = labels.get(manifests.TENANT), labels.get(manifests.INSTANCE)
        if not tenant or not instance:
            return
        key = f"{tenant}/{instance}"
        if event_type == "DELETED":
            self.pods.pop(key, None)
        else:
            self.pods[key] = pod
        self._wake(instance_item(key))

    def _on_service_pod(self, key: str, event_type: str, pod: Manifest) -> None:
        _track(self.service_pods.setdefault(key, {}), event_type, pod)
        self._wake(service_item(key))

    def _on_node(self, event_type: str, node: Manifest) -> None:
        name = node["metadata"]["name"]
        was = (self.node_ok(name), self.node_quarantined(name))
        if event_type == "DELETED":
            self.nodes.pop(name, None)
        else:
            self.nodes[name] = node
        if was != (self.node_ok(name), self.node_quarantined(name)):
            for key, pod in self.pods.items():
                if pod.get("spec", {}).get("nodeName") == name:
                    self._wake(instance_item(key))
            for key, pods in self.service_pods.items():
                if any(p.pod.get("spec", {}).get("nodeName") == name for p in pods.values()):
                    self._wake(service_item(key))

    def node_quarantined(self, name: str) -> bool:
        labels = self.nodes.get(name, {}).get("metadata", {}).get("labels", {})
        return bool(labels.get(manifests.HEALTH) == "quarantined")

    def node_usable(self, name: str) -> bool:
        """Whether new pods may go to `name`: Ready, neither cordoned nor quarantined."""
        node = self.nodes.get(name)
        return (
            node is not None
            and not node.get("spec", {}).get("unschedulable")
            and self.node_ok(name)
            and not self.node_quarantined(name)
        )

    def stock_units_in_use(self) -> set[str]:
        """The warm units whose instance pods exist (bound to their nodes)."""
        return {
            unit
            for pod in self.pods.values()
            if (unit := pod["metadata"].get("annotations", {}).get(manifests.STOCK_UNIT))
        }

    def waiting_for_a_node(self) -> list[Manifest]:
        """Live instance, job and service pods the scheduler found no room for."""
        live = list(self.pods.values()) + [
            tracked.pod
            for tracked_by_name in (*self.job_pods.values(), *self.service_pods.values())
            for tracked in tracked_by_name.values()
            if tracked.live
        ]
        return [pod for pod in live if _waits_for_a_node(pod)]

    def node_ok(self, name: str | None) -> bool:
        """Whether a pod on `name` can be trusted: Ready, or NotReady only briefly."""
        if name is None:
            return True
        node = self.nodes.get(name)
        if node is None:
            return False
        conditions = {c["type"]: c for c in node.get("status", {}).get("conditions") or []}
        ready = conditions.get("Ready", {})
        if ready.get("status") == "True":
            return True
        since = ready.get("lastTransitionTime")
        if not since:
            return False
        not_ready_for = now() - datetime.fromisoformat(since.replace("Z", "+00:00"))
        return not_ready_for.total_seconds() < self._node_lost_grace_s

    def zone_of(self, node: str | None) -> str | None:
        labels = self.nodes.get(node or "", {}).get("metadata", {}).get("labels", {})
        zone: str | None = labels.get(manifests.ZONE_LABEL)
        return zone

    def fits_fleet(self, doc: Workload) -> bool:
        """Whether any node of the fleet could ever hold one pod of the workload `doc`:
        its `gpu_count` units of its GPU kind and type, in one of its zones (any zone
        when it names none), busy or not."""
        return self.nodes_that_fit(doc) > 0

    def nodes_that_fit(self, doc: Workload) -> int:
        """How many nodes of the fleet could ever hold one pod of `doc` (see fits_fleet)."""
        return nodes_that_fit(self.nodes.values(), doc)

    def gpu_accounting(self) -> GpuAccounting:
        """GPU units per pool in the fleet's usable nodes, free on them, and held per
        tenant by live pods (capacity.py)."""
        usable = {name: node for name, node in self.nodes.items() if self.node_usable(name)}
        live = list(self.pods.values()) + [
            tracked.pod
            for pods in (*self.job_pods.values(), *self.service_pods.values())
            for tracked in pods.values()
            if tracked.live
        ]
        return gpu_accounting(usable, live)

    def pod_node_ok(self, pod: Manifest) -> bool:
        return self.node_ok(pod.get("spec", {}).get("nodeName"))


def _job_key(obj: Manifest) -> str | None:
    """The job key a Kubernetes Job or job pod is labelled with, if any."""
    labels = obj.get("metadata", {}).get("labels", {})
    tenant, job = labels.get(manifests.TENANT), labels.get(manifests.JOB)
    return f"{tenant}/{job}" if tenant and job else None


def _forget(pods_by_key: dict[str, dict[str, TrackedPod]], key: str, name: str) -> None:
    pods = pods_by_key.get(key, {})
    pods.pop(name, None)
    if not pods:
        pods_by_key.pop(key, None)


def _service_key(pod: Manifest) -> str | None:
    """The inference service key a replica's pod is labelled with, if any."""
    labels = pod.get("metadata", {}).get("labels", {})
    tenant, service = labels.get(manifests.TENANT), labels.get(manifests.SERVICE)
    return f"{tenant}/{service}" if tenant and service else None


def _waits_for_a_node(pod: Manifest) -> bool:
    """Unbound, and the scheduler's last pass found no node with room for it."""
    if pod.get("spec", {}).get("nodeName") or pod["metadata"].get("deletionTimestamp"):
        return False
    conditions = pod.get("status", {}).get("conditions") or []
    return any(
        c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable" for c in conditions
    )


def _track(pods: dict[str, TrackedPod], event_type: str, pod: Manifest) -> None:
    """Keep a job's or a service's pod, with when it was first seen and seen gone."""
    name = pod["metadata"]["name"]
    previous = pods.get(name)
    seen_at = previous.seen_at if previous else None
    if previous is None and event_type == "ADDED":
        seen_at = now_as_stored()
    gone_at = now_as_stored() if event_type == "DELETED" else None
    pods[name] = TrackedPod(pod, gone_at, seen_at)
