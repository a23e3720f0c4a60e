"""Which nodes the telemetry consumer knows (known_nodes.py) when the cluster cannot be
asked: a Kubernetes client not connected yet, as at the service's start."""

from __future__ import annotations

import pytest

from gpucloud_libs.errors import DependencyUnavailable
from gpucloud_libs.kube import KubeClient
from gpucloud_monitoring.known_nodes import KnownNodes


async def test_a_node_is_not_refused_for_want_of_an_answer() -> None:
    """Before the first list of the cluster's nodes, a report waits (its batch is
    consumed again) rather than being dropped: an inventory comes once, then every ten
    minutes."""
    nodes = KnownNodes(KubeClient(None))
    with pytest.raises(DependencyUnavailable, match="cannot list the cluster's nodes yet"):
        await nodes.known("gpu-node-1")


async def test_another_clusters_nodes_are_known_as_said_and_forgotten_when_it_is_gone() -> None:
    """The instances service says each registered cluster's nodes: their telemetry is
    taken without asking the monitoring service's own cluster, which has not got them."""
    nodes = KnownNodes(KubeClient(None))
    nodes.set_cluster("local-2", frozenset({"b200-zone-c-0", "b200-zone-c-1"}))
    assert await nodes.known("b200-zone-c-1")
    nodes.set_cluster("local-2", frozenset())  # the cluster was deleted
    with pytest.raises(DependencyUnavailable):
        await nodes.known("b200-zone-c-1")  # asked of its own cluster again


async def test_every_replica_reads_the_other_clusters_from_the_store_as_kept() -> None:
    nodes = KnownNodes(KubeClient(None))
    nodes.replace_clusters({"local-2": frozenset({"b200-zone-c-0"}), "gone": frozenset()})
    assert await nodes.known("b200-zone-c-0")
    nodes.replace_clusters({})
    with pytest.raises(DependencyUnavailable):
        await nodes.known("b200-zone-c-0")
