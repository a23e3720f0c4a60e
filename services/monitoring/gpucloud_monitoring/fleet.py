"""The fleet (platform admin): nodes by zone, GPU type, tier and health; and the release of a
quarantined node, which goes to the consumer that owns the node's health."""

from __future__ import annotations

from collections import defaultdict

from faststream.kafka import KafkaBroker

from gpucloud_libs.clock import now
from gpucloud_libs.errors import NotFound
from gpucloud_libs.events import NodeHealthRequest, NodeQuarantineRequested, NodeReleaseRequested
from gpucloud_libs.identity import Identity
from gpucloud_libs.kafka import publish_event
from gpucloud_libs.kube import KubeClient
from gpucloud_libs.naming import GPU_PRODUCT_LABEL, ZONE_LABEL, gpu_product
from gpucloud_libs.topics import TELEMETRY

from .documents import HealthDoc, InventoryDoc, NodeStatusDoc
from .fleet_requests import FleetRequestSeal
from .schemas import Capacity, FleetGroup, FleetSummary, NodeView
from .store import MonitoringStore


class Fleet:
    def __init__(
        self,
        store: MonitoringStore,
        kube: KubeClient,
        broker: KafkaBroker,
        seal: FleetRequestSeal,
        *,
        source: str,
    ) -> None:
        self._seal = seal
        self._store = store
        self._kube = kube
        self._broker = broker
        self._source = source
        self._node_labels: dict[str, dict[str, str]] = {}

    async def refresh_nodes(self) -> None:
        """Zone and GPU type per node, from the cluster's node labels."""
        nodes, _ = await self._kube.list("Node")
        self._node_labels = {
            node["metadata"]["name"]: node["metadata"].get("labels", {}) for node in nodes
        }

    async def nodes(self, identity: Identity) -> list[NodeView]:
        identity.require_role("platform-admin")
        views, _ = await self._node_views()
        return views

    async def _node_views(self) -> tuple[list[NodeView], list[InventoryDoc]]:
        """Every node's view, and the inventories they were built from."""
        inventories = await self._store.inventories()
        healths = await self._store.healths()
        statuses = await self._store.node_statuses()
        views = [
            self._view(name, inventories.get(name), healths.get(name), statuses.get(name))
            for name in sorted(set(inventories) | set(healths))
        ]
        return views, list(inventories.values())

    def _view(
        self,
        name: str,
        inventory: InventoryDoc | None,
        health: HealthDoc | None,
        status: NodeStatusDoc | None,
    ) -> NodeView:
        gpus = inventory["gpus"] if inventory else []
        current = list(status["gpus"].values()) if status else []
        # A slice of a shared GPU puts its physical GPU in use.
        in_use = {
            gpu.get("parent_gpu_uuid") or uuid
            for uuid, gpu in (status["gpus"].items() if status else [])
            if gpu["instance_id"]
        }
        labels = self._node_labels.get(name, {})
        return NodeView(
            node=name,
            cluster=inventory.get("cluster") if inventory else None,
            zone=labels.get(ZONE_LABEL) or (inventory.get("zone") if inventory else None),
            gpu_type=labels.get(GPU_PRODUCT_LABEL)
            or (gpu_product(gpus[0]["name"]) if gpus else None),
            gpus=len(gpus),
            tiers=sorted({gpu["tier"] for gpu in gpus}),
            health=health["health"] if health else "healthy",
            health_reasons=health["reasons"] if health else [],
            health_since=health["since"] if health else None,
            gpus_in_use=len(in_use),
            utilization_gpu_pct=round(
                sum(g["utilization_gpu_pct_avg"] for g in current) / len(current), 1
            )
            if current
            else None,
            telemetry=inventory["source"] if inventory else None,
            unavailable_reason=inventory["unavailable_reason"] if inventory else None,
        )

    async def release_node(self, identity: Identity, node: str) -> NodeView:
        """Ask the consumer that owns the node's health to release it; the node as it
        is now."""
        return await self._request(
            identity, NodeReleaseRequested(node=node, requested_by=identity.subject, at=now())
        )

    async def quarantine_node(self, identity: Identity, node: str, reason: str) -> NodeView:
        """Ask the consumer that owns the node's health to quarantine it: placement
        avoids it and the instances controller moves what it can off it."""
        return await self._request(
            identity,
            NodeQuarantineRequested(
                node=node, requested_by=identity.subject, reason=reason, at=now()
            ),
        )

    async def _request(self, identity: Identity, request: NodeHealthRequest) -> NodeView:
        """The request goes on the telemetry topic, keyed by node, so the health machine
        applies it in order with the node's samples; sealed, since the agent writes
        there too (fleet_requests.py)."""
        identity.require_role("platform-admin")
        found = [view for view in await self.nodes(identity) if view.node == request.node]
        if not found:
            raise NotFound(f"node {request.node!r} not found")
        await publish_event(self._broker, TELEMETRY, self._seal.seal(request), source=self._source)
        return found[0]

    async def capacity(self) -> list[Capacity]:
        """Free whole GPUs by zone and type, node by node: for everyone, so it names no
        node and no tenant. As of the nodes' last reports (a few seconds old)."""
        nodes, _ = await self._node_views()
        free: dict[tuple[str, str], list[int]] = defaultdict(list)
        for node in nodes:
            if node.health == "healthy" and node.gpus and node.gpu_type:
                # A status may report more GPUs in use than the inventory lists.
                free[(node.zone or "unknown", node.gpu_type)].append(
                    max(0, node.gpus - node.gpus_in_use)
                )
        return [
            Capacity(zone=zone, gpu_type=gpu_type, free_by_node=sorted(counts, reverse=True))
            for (zone, gpu_type), counts in sorted(free.items())
        ]

    async def fleet(self, identity: Identity) -> FleetSummary:
        identity.require_role("platform-admin")
        nodes, inventories = await self._node_views()
        groups: dict[tuple[str, str], list[NodeView]] = defaultdict(list)
        for node in nodes:
            groups[(node.zone or "unknown", node.gpu_type or "unknown")].append(node)
        tiers: dict[str, int] = defaultdict(int)
        for inventory in inventories:
            for gpu in inventory["gpus"]:
                tiers[gpu["tier"]] += 1
        health: dict[str, int] = defaultdict(int)
        for node in nodes:
            health[node.health] += 1
        return FleetSummary(
            nodes=len(nodes),
            gpus=sum(node.gpus for node in nodes),
            gpus_in_use=sum(node.gpus_in_use for node in nodes),
            by_tier=dict(tiers),
            by_health=dict(health),
            groups=[
                FleetGroup(
                    zone=zone,
                    gpu_type=gpu_type,
                    nodes=len(members),
                    gpus=sum(m.gpus for m in members),
                    gpus_in_use=sum(m.gpus_in_use for m in members),
                    utilization_gpu_pct=weighted_utilization(members),
                    quarantined_nodes=sum(1 for m in members if m.health == "quarantined"),
                )
                for (zone, gpu_type), members in sorted(groups.items())
            ],
        )


def weighted_utilization(members: list[NodeView]) -> float | None:
    reporting = [m for m in members if m.utilization_gpu_pct is not None]
    gpus = sum(m.gpus for m in reporting)
    if not gpus:
        return None
    return round(sum((m.utilization_gpu_pct or 0) * m.gpus for m in reporting) / gpus, 1)
