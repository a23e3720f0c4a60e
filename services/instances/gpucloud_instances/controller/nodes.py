"""Node health from monitoring, applied to the node's cluster: a quarantined node is
cordoned."""

from __future__ import annotations

import logging

from gpucloud_libs.errors import DependencyUnavailable
from gpucloud_libs.kube import NotFoundError

from .. import manifests
from ..cluster_clients import ClusterClients

log = logging.getLogger(__name__)


class NodeCordons:
    def __init__(self, clusters: ClusterClients) -> None:
        self._clusters = clusters

    async def set_health(self, node: str, health: str, cluster: str | None = None) -> None:
        """Label the node with its health in its cluster (None: the home cluster); a
        quarantined one is also made unschedulable, so no workload or stock placeholder
        lands there. A cluster that does not answer fails the event, which is consumed
        again."""
        quarantined = health == "quarantined"
        kube = await self._clusters.of(cluster)
        try:
            await kube.patch(
                "Node", None, node,
                {"metadata": {"labels": {manifests.HEALTH: health}}, "spec": {"unschedulable": quarantined}},
            )  # fmt: skip
        except NotFoundError:
            log.info("health event for an unknown node", extra={"node": node, "cluster": cluster})
        except DependencyUnavailable:
            await self._clusters.forget(cluster)
            raise
