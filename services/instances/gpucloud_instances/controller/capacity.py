"""The fleet's GPU capacity, from the nodes and pods the controller's cache holds:
pure, so placement, the admission queue and warm stocks count GPUs one way."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from gpucloud_libs.gpu_shares import GpuShare, gpu_units
from gpucloud_libs.kube import Manifest

from .. import manifests
from ..documents import InstanceDoc, JobDoc

#: What `nodes_that_fit` reads: a workload whose pods each hold `gpu_count` units.
Workload = InstanceDoc | JobDoc


@dataclass
class GpuAccounting:
    capacity: dict[str, int] = field(default_factory=dict)
    free: dict[str, int] = field(default_factory=dict)
    #: tenant -> pool -> GPUs its live pods hold (or wait to hold).
    held: dict[str, dict[str, int]] = field(default_factory=dict)
    #: pool -> node -> units free on it (pods not bound to a node yet not counted).
    node_free: dict[str, dict[str, int]] = field(default_factory=dict)


def pool_of(doc: Workload, home: str) -> str:
    """The pool a workload's GPUs come from: its GPU kind and type in its cluster
    (`home` for one recorded before clusters were)."""
    kind = GpuShare.of(doc).capacity_key(doc["gpu_type"])
    return f"{doc.get('cluster') or home}/{kind}"


def across_clusters(accountings: dict[str, GpuAccounting]) -> GpuAccounting:
    """Each cluster's accounting (by name) as one, each pool named with its cluster
    (as `pool_of` names it)."""
    merged = GpuAccounting()
    for cluster, accounting in accountings.items():
        merged.capacity |= {f"{cluster}/{p}": n for p, n in accounting.capacity.items()}
        merged.free |= {f"{cluster}/{p}": n for p, n in accounting.free.items()}
        merged.node_free |= {f"{cluster}/{p}": n for p, n in accounting.node_free.items()}
        for tenant, pools in accounting.held.items():
            merged.held.setdefault(tenant, {}).update(
                {f"{cluster}/{p}": n for p, n in pools.items()}
            )
    return merged


def nodes_that_fit(nodes: Iterable[Manifest], doc: Workload) -> int:
    """How many of `nodes` could ever hold one pod of the workload `doc`: its
    `gpu_count` units of its GPU kind and type, in one of its zones (any zone when it
    names none), busy or not."""
    resource, zones = GpuShare.of(doc).resource, doc["zones"]
    fitting = 0
    for node in nodes:
        labels = node["metadata"].get("labels", {})
        if labels.get(manifests.GPU_PRODUCT_LABEL) != doc["gpu_type"]:
            continue
        if zones and labels.get(manifests.ZONE_LABEL) not in zones:
            continue
        if node_gpus(node).get(resource, 0) >= doc["gpu_count"]:
            fitting += 1
    return fitting


def gpu_accounting(usable: dict[str, Manifest], live: list[Manifest]) -> GpuAccounting:
    """GPU units per pool (`GpuShare.capacity_key`: whole GPUs by type, each shared
    kind apart): in the `usable` nodes (by name), free on them, and held per tenant by
    the `live` pods (a pod waiting for a node counts against the free units of its
    pool: it takes them as soon as the scheduler binds it)."""
    accounting = GpuAccounting()
    gpu_types: dict[str, str] = {}  # usable node -> GPU type
    for name, node in usable.items():
        gpu_type = node["metadata"].get("labels", {}).get(manifests.GPU_PRODUCT_LABEL)
        if not gpu_type:
            continue
        gpu_types[name] = gpu_type
        for resource, units in node_gpus(node).items():
            pool = GpuShare(resource).capacity_key(gpu_type)
            accounting.capacity[pool] = accounting.capacity.get(pool, 0) + units
            accounting.node_free.setdefault(pool, {})[name] = units
    accounting.free = dict(accounting.capacity)
    for pod in live:
        spec = pod.get("spec", {})
        gpu_type = (spec.get("nodeSelector") or {}).get(manifests.GPU_PRODUCT_LABEL)
        node = spec.get("nodeName")
        if not gpu_type or (node and node not in gpu_types):
            continue
        tenant = pod["metadata"].get("labels", {}).get(manifests.TENANT)
        for resource, units in pod_gpus(pod).items():
            pool = GpuShare(resource).capacity_key(gpu_type)
            accounting.free[pool] = max(accounting.free.get(pool, 0) - units, 0)
            on_node = accounting.node_free.get(pool, {})
            if node in on_node:
                on_node[node] = max(on_node[node] - units, 0)
            if tenant:
                held = accounting.held.setdefault(tenant, {})
                held[pool] = held.get(pool, 0) + units
    return accounting


def node_gpus(node: Manifest) -> dict[str, int]:
    """A node's allocatable GPU units, by resource (whole GPUs and shared kinds)."""
    return gpu_units(node.get("status", {}).get("allocatable", {}))


def pod_gpus(pod: Manifest) -> dict[str, int]:
    """The GPU units a pod requests, by resource."""
    containers = pod.get("spec", {}).get("containers") or [{}]
    return gpu_units((containers[0].get("resources") or {}).get("requests") or {})
