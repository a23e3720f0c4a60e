"""List+watch caches of what the controller reconciles against: pods and nodes.

Each kind is listed, then watched from the list's resourceVersion; an expired
version relists. A change wakes the work item it concerns, so reconcilers read
observed state from here instead of calling the API server.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime

from gpucloud_libs.clock import now
from gpucloud_libs.kube import GoneError, KubeClient, Manifest

from .. import manifests

log = logging.getLogger(__name__)

KINDS = ("Pod", "Node")


class ClusterCache:
    def __init__(
        self,
        kube: KubeClient,
        *,
        wake: Callable[[str], object],
        wake_stocks: Callable[[], None],
        node_lost_grace_s: float,
    ) -> None:
        self._kube = kube
        self._wake = wake
        self._wake_stocks = wake_stocks
        self._node_lost_grace_s = node_lost_grace_s
        self.pods: dict[str, Manifest] = {}  # instance key -> pod
        self.stock_pods: dict[str, Manifest] = {}  # placeholder name -> pod
        self.nodes: dict[str, Manifest] = {}
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

    def _replace(self, kind: str, items: list[Manifest]) -> None:
        if kind == "Node":
            self.nodes = {node["metadata"]["name"]: node for node in items}
            return
        self.pods.clear()
        self.stock_pods.clear()
        for pod in items:
            self._on_pod("ADDED", pod)
        for key in list(self.pods):
            self._wake(key)

    def _on_pod(self, event_type: str, pod: Manifest) -> None:
        labels = pod.get("metadata", {}).get("labels", {})
        if manifests.STOCK in labels:
            name = pod["metadata"]["name"]
            if event_type == "DELETED":
                self.stock_pods.pop(name, None)
            else:
                self.stock_pods[name] = pod
            self._wake_stocks()
            return
        tenant, instance = labels.get(manifests.TENANT), labels.get(manifests.INSTANCE)
        if not tenant or not instance:
            return
        key = f"{tenant}/{instance}"
        if event_type == "DELETED":
            self.pods.pop(key, None)
        else:
            self.pods[key] = pod
        self._wake(key)

    def _on_node(self, event_type: str, node: Manifest) -> None:
        name = node["metadata"]["name"]
        was_ok = self.node_ok(name)
        if event_type == "DELETED":
            self.nodes.pop(name, None)
        else:
            self.nodes[name] = node
        if was_ok != self.node_ok(name):
            for key, pod in self.pods.items():
                if pod.get("spec", {}).get("nodeName") == name:
                    self._wake(key)

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

    def pod_node_ok(self, pod: Manifest) -> bool:
        return self.node_ok(pod.get("spec", {}).get("nodeName"))
