"""Node health from monitoring, applied to the node's cluster: a quarantined node is
cordoned."""

from __future__ import annotations

import logging

from gpucloud_libs.errors import DependencyUnavailable
from gpucloud_libs.kube import KubeError, NotFoundError

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
        try:
            kube = await self._clusters.of(cluster)
            await kube.patch(
                "Node", None, node,
                {"metadata": {"labels": {manifests.HEALTH: health}}, "spec": {"unschedulable": quarantined}},
            )  # fmt: skip
        except NotFoundError:
            log.info("health event for an unknown node", extra={"node": node, "cluster": cluster})
        except (DependencyUnavailable, KubeError) as error:
            if self._clusters.is_home(cluster):
                raise  # consumed again: the home cluster is where the lease is
            # Another cluster, unregistered or not answering, must not hold up the
            # topic (every other node's health waits behind it): its node stays as it
            # is, and a lost cluster takes no new workloads anyway.
            await self._clusters.forget(cluster)
            log.warning(
                "node health not applied: its cluster does not answer",
                extra={"node": node, "cluster": cluster, "health": health, "error": str(error)[:300]},
            )  # fmt: skip
