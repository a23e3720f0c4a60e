"""Node health: the health machine's changes, stored and published for placement and billing.

A change is stored unpublished, then published; the republish sweep sends any
that a failure left behind (the event id is the node and the change's time).
"""

from __future__ import annotations

import logging

from faststream.kafka import KafkaBroker

from gpucloud_libs.clock import aware
from gpucloud_libs.events import NodeHealthChanged
from gpucloud_libs.kafka import publish_event
from gpucloud_libs.topics import NODE_HEALTH

from .documents import HealthFields
from .health import HealthChange, HealthTracker
from .store import MonitoringStore

log = logging.getLogger(__name__)


class NodeHealth:
    def __init__(
        self, store: MonitoringStore, broker: KafkaBroker, tracker: HealthTracker, *, source: str
    ) -> None:
        self._store = store
        self._broker = broker
        self._tracker = tracker
        self._source = source

    async def restore(self) -> None:
        """The tracker's state after a start, from the stored healths."""
        for node, doc in (await self._store.healths()).items():
            self._tracker.restore(node, doc["health"], tuple(doc["reasons"]))

    async def changed(self, change: HealthChange) -> None:
        doc: HealthFields = {
            "health": change.health,
            "previous": change.previous,
            "reasons": list(change.reasons),
            "since": change.at,
            "published": False,
        }
        await self._store.put_health(change.node, doc)
        log.info(
            "node health changed",
            extra={"node": change.node, "health": change.health, "reasons": list(change.reasons)},
        )
        await self._publish(change.node, doc)

    async def _publish(self, node: str, doc: HealthFields) -> None:
        await publish_event(
            self._broker, NODE_HEALTH,
            NodeHealthChanged(
                node=node, cluster=await self._cluster_of(node),
                health=doc["health"], previous_health=doc["previous"],
                reasons=tuple(doc["reasons"]), at=aware(doc["since"]),
            ),
            source=self._source, event_id=f"{node}@{aware(doc['since']).isoformat()}",
        )  # fmt: skip
        await self._store.put_health(node, {**doc, "published": True})

    async def _cluster_of(self, node: str) -> str | None:
        """The node's cluster, where the instances service cordons it: as its agent
        reports it, else as the instances service said that cluster's nodes (a node
        whose inventory has not come yet); None: the monitoring service's own."""
        inventory = await self._store.inventory(node)
        if inventory is not None and inventory.get("cluster"):
            return inventory.get("cluster")
        for cluster, nodes in (await self._store.cluster_nodes()).items():
            if node in nodes:
                return cluster
        return None

    async def republish(self) -> None:
        """Publish the changes a failure left unpublished."""
        for node, doc in (await self._store.healths()).items():
            if not doc["published"]:
                await self._publish(
                    node,
                    {"health": doc["health"], "previous": doc["previous"],
                     "reasons": doc["reasons"], "since": doc["since"], "published": False},
                )  # fmt: skip
