"""Kubernetes clients of the registered clusters, for the API's replicas (the leader
drives each cluster with a runtime of its own, controller/runtimes.py): one per
cluster, opened from its kubeconfig on first use, and again when the cluster was
registered again with another kubeconfig or stopped answering."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from gpucloud_libs.errors import DependencyUnavailable
from gpucloud_libs.kube import KubeClient
from gpucloud_libs.kubeconfigs import ClientsByKubeconfig

#: A registered cluster's kubeconfig, parsed (None: not registered, or not usable).
KubeconfigOf = Callable[[str], Awaitable[dict[str, Any] | None]]


class ClusterNotRegistered(DependencyUnavailable):
    """A cluster no longer registered (or whose kubeconfig cannot be used)."""


class ClusterClients:
    def __init__(self, home: KubeClient, home_name: str, kubeconfig_of: KubeconfigOf) -> None:
        self.home = home
        self._home_name = home_name
        self._kubeconfig_of = kubeconfig_of
        self._others = ClientsByKubeconfig()

    def is_home(self, cluster: str | None) -> bool:
        return not cluster or cluster == self._home_name

    async def of(self, cluster: str | None) -> KubeClient:
        """The client of `cluster` (None: the home cluster); a 503 when it has no usable
        kubeconfig."""
        if self.is_home(cluster):
            return self.home
        assert cluster is not None
        config = await self._kubeconfig_of(cluster)
        if config is None:
            raise ClusterNotRegistered(f"cluster {cluster!r} is not registered")
        return await self._others.client(cluster, config)

    async def forget(self, cluster: str | None) -> None:
        """A registered cluster that did not answer: its client is opened afresh next
        time."""
        if not self.is_home(cluster):
            await self._others.forget(cluster or "")

    async def close(self) -> None:
        """The registered clusters' clients (the home one is its owner's to close)."""
        await self._others.close()
