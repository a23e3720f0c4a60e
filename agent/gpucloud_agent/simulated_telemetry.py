"""The simulated fleet's telemetry: every kwok node matching a selector gets simulated
GPUs (simulated.py), loaded by the platform's pods placed on it, as the cluster has them
now. It stands in for NVML on nodes that have no GPUs, and is labelled so in its
events (`source: simulated`)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from gpucloud_libs.events import NodeInventory, TelemetryBatch
from gpucloud_libs.gpu_shares import gpu_units
from gpucloud_libs.kube import KubeClient
from gpucloud_libs.naming import (
    GPU_PRODUCT_LABEL,
    GPU_RESOURCE,
    TENANT_LABEL,
    ZONE_LABEL,
    workload_of,
)

from .simulated import Placement, SimulatedFleet, slice_layout

#: GPU feature discovery's count of a node's physical GPUs.
GPU_COUNT_LABEL = "nvidia.com/gpu.count"
#: The nodes and pods are read again this often: listing every pod each second would
#: load the API server more than the telemetry does.
SYNC_EVERY_S = 10.0


class SimulatedTelemetry:
    """The TelemetrySource of the simulated fleet."""

    def __init__(self, fleet: SimulatedFleet, kube: KubeClient, selector: str) -> None:
        self.fleet = fleet
        self._kube = kube
        self._selector = selector
        self._sync_due = 0.0
        #: Set once the cluster's nodes were first read: the stand-ins wait for it.
        self.synced = asyncio.Event()

    async def nodes_added(self) -> list[str]:
        now = asyncio.get_running_loop().time()
        if now < self._sync_due:
            return []
        added = await sync_fleet(self.fleet, self._kube, self._selector)
        self._sync_due = now + SYNC_EVERY_S
        self.synced.set()
        return added

    def nodes(self) -> list[str]:
        return list(self.fleet.nodes)

    def inventory(self, node: str) -> NodeInventory:
        return NodeInventory(
            node=node, source="simulated", gpus=tuple(self.fleet.inventory(node)), at=_now(),
            zone=self.fleet.zones.get(node),
        )  # fmt: skip

    async def batches(self) -> list[TelemetryBatch]:
        at = _now()  # one instant for the whole fleet's round
        return [
            TelemetryBatch(
                node=name, source="simulated", samples=tuple(self.fleet.sample(name, at))
            )
            for name in self.fleet.nodes
        ]


async def sync_fleet(fleet: SimulatedFleet, kube: KubeClient, selector: str) -> list[str]:
    """Bring the simulated nodes and their instances in line with the cluster; returns
    the nodes that are new (their inventory is due)."""
    nodes, _ = await kube.list("Node", label_selector=selector)
    pods, _ = await kube.list("Pod", label_selector=TENANT_LABEL)
    seen, added = set(), []
    for node in nodes:
        name, labels = node["metadata"]["name"], node["metadata"].get("labels", {})
        units = gpu_units(node.get("status", {}).get("capacity", {}))
        # A node whose GPUs are all shared out advertises no whole ones; GPU feature
        # discovery's count label still says how many there are.
        gpus = units.pop(GPU_RESOURCE, 0) or int(labels.get(GPU_COUNT_LABEL, "0"))
        shared = {resource: count for resource, count in units.items() if count}
        if gpus == 0:
            continue
        seen.add(name)
        if name not in fleet.nodes:
            added.append(name)
        fleet.set_node(
            name, labels.get(GPU_PRODUCT_LABEL, "unknown"), gpus, slice_layout(gpus, shared)
        )
        fleet.zones[name] = labels.get(ZONE_LABEL)
    placed: dict[str, list[tuple[str, Placement]]] = {}
    for pod in pods:
        node_name = pod.get("spec", {}).get("nodeName")
        workload = workload_of(pod["metadata"].get("labels", {}))
        if (
            node_name in seen
            and workload is not None
            and pod.get("status", {}).get("phase") == "Running"
        ):
            tenant, workload_id = workload
            limits = pod["spec"]["containers"][0].get("resources", {}).get("limits", {})
            for resource, count in gpu_units(limits).items():
                placed.setdefault(node_name, []).append((
                    pod["metadata"].get("creationTimestamp", ""),
                    Placement(tenant, workload_id, count, resource),
                ))  # fmt: skip
    for name in list(fleet.nodes):
        if name not in seen:
            fleet.remove_node(name)
            continue
        ordered = sorted(placed.get(name, []), key=lambda item: (item[0], item[1].instance_id))
        fleet.place(name, [placement for _, placement in ordered])
    return added


def _now() -> datetime:
    return datetime.now(UTC)
