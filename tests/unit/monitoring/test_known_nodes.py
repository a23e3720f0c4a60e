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
