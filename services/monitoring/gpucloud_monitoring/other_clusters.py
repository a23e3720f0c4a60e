"""The nodes of the clusters other than the monitoring service's own, as the instances
service's controller, which drives them all, says them on the clusters topic: their
agents' telemetry is taken as its own cluster's is (known_nodes.py). Kept in the store,
so a restart knows them before the next word."""

from __future__ import annotations

from gpucloud_libs.events import ClusterNodes

from .known_nodes import KnownNodes
from .store import MonitoringStore


class OtherClusters:
    def __init__(self, store: MonitoringStore, nodes: KnownNodes | None) -> None:
        self._store = store
        self._nodes = nodes

    async def restore(self) -> None:
        """What the store keeps: at start, and every half minute after, since only
        the replica consuming the clusters topic hears each word as it is said."""
        if self._nodes is None:
            return
        stored = await self._store.cluster_nodes()
        self._nodes.replace_clusters({name: frozenset(nodes) for name, nodes in stored.items()})

    async def said(self, event: ClusterNodes) -> None:
        await self._store.put_cluster_nodes(event.cluster, list(event.nodes))
        if self._nodes is not None:
            self._nodes.set_cluster(event.cluster, frozenset(event.nodes))
