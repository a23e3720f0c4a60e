"""The clusters' nodes, as the telemetry consumer knows them: its own cluster's, read
from Kubernetes, and every other registered cluster's, as the instances service says
them (other_clusters.py).

The agent's Kafka principal is shared by every GPU node, so without this any holder of
it could add a "ghost" node to the fleet: its inventory would show in the operator's
console and its samples would feed rules and health. Telemetry is taken only from nodes
the Kubernetes cluster has (review M4).

A name not yet known is looked up at once (a node that has just joined sends its
inventory once, then every ten minutes: it must not be missed), at most
`lookups_per_s` a second whatever names a flood makes up; a name found missing is not
looked up again for `absent_s`. The whole list is re-read every `relist_s`, which is
how a deleted node stops being known. When the cluster cannot be asked (the service
starting, the API server away), the batch fails and is consumed again: telemetry of
a real node is never dropped for want of an answer.
"""

from __future__ import annotations

import logging
import time

from gpucloud_libs.errors import DependencyUnavailable
from gpucloud_libs.kube import KubeClient, KubeError, NotFoundError

log = logging.getLogger(__name__)


class KnownNodes:
    def __init__(
        self,
        kube: KubeClient,
        *,
        lookups_per_s: int = 10,
        absent_s: float = 5.0,
        relist_s: float = 60.0,
    ) -> None:
        self._kube = kube
        self._lookups_per_s, self._absent_s, self._relist_s = lookups_per_s, absent_s, relist_s
        self._names: set[str] = set()
        #: Other clusters' nodes, as the instances service says them (other_clusters.py).
        self._others: dict[str, frozenset[str]] = {}
        self._listed_at = float("-inf")
        self._absent: dict[str, float] = {}  # name -> when it was found missing
        self._lookups: list[float] = []

    def set_cluster(self, cluster: str, nodes: frozenset[str]) -> None:
        """Another cluster's nodes, as said last (none: it is gone)."""
        if nodes:
            self._others[cluster] = nodes
        else:
            self._others.pop(cluster, None)

    def replace_clusters(self, clusters: dict[str, frozenset[str]]) -> None:
        """Every other cluster's nodes, as the store keeps them."""
        self._others = {cluster: nodes for cluster, nodes in clusters.items() if nodes}

    async def known(self, node: str) -> bool:
        if any(node in nodes for nodes in self._others.values()):
            return True
        now = time.monotonic()
        if now - self._listed_at >= self._relist_s:
            try:
                nodes, _ = await self._kube.list("Node")
            except (KubeError, DependencyUnavailable) as error:
                if self._listed_at == float("-inf"):
                    # Never listed (the service is starting, Kubernetes away): the batch
                    # waits and is consumed again, rather than its nodes being refused.
                    raise DependencyUnavailable(
                        f"cannot list the cluster's nodes yet: {error}"
                    ) from error
                log.warning("cannot list the cluster's nodes: %s", error)  # keep the last list
            else:
                self._names = {item["metadata"]["name"] for item in nodes}
                self._absent = {}
            self._listed_at = now
        if node in self._names:
            return True
        if now - self._absent.get(node, float("-inf")) < self._absent_s:
            return False
        self._lookups = [at for at in self._lookups if now - at < 1.0]
        if len(self._lookups) >= self._lookups_per_s:
            return False  # a flood of made-up names: refused unread
        self._lookups.append(now)
        try:
            await self._kube.read("Node", None, node)
        except (KubeError, DependencyUnavailable) as error:
            if not isinstance(error, NotFoundError):
                # Not known to be absent: the batch is consumed again later, not dropped
                # (an inventory comes once, then every ten minutes).
                raise DependencyUnavailable(f"cannot look up node {node}: {error}") from error
            if len(self._absent) < 10_000:
                self._absent[node] = now
            log.warning(
                "refused telemetry from a node the cluster does not have", extra={"node": node}
            )
            return False
        self._names.add(node)
        return True
