"""Node health from monitoring, applied to the cluster: a quarantined node is cordoned."""

from __future__ import annotations

import logging

from gpucloud_libs.kube import KubeClient, NotFoundError

from .. import manifests

log = logging.getLogger(__name__)


class NodeCordons:
    def __init__(self, kube: KubeClient) -> None:
        self._kube = kube

    async def set_health(self, node: str, health: str) -> None:
        """Label the node with its health; a quarantined one is also made unschedulable,
        so no instance or stock placeholder lands there."""
        quarantined = health == "quarantined"
        try:
            await self._kube.patch(
                "Node", None, node,
                {"metadata": {"labels": {manifests.HEALTH: health}}, "spec": {"unschedulable": quarantined}},
            )  # fmt: skip
        except NotFoundError:
            log.info("health event for an unknown node", extra={"node": node})
