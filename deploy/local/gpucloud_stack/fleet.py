"""Registers the fake GPU nodes of each local cluster's fleet file
(deploy/local/fleet.toml, fleet-local-2.toml) with its API server.

kwok manages every node annotated `kwok.x-k8s.io/node=fake`: it keeps them Ready
and plays the kubelet for pods bound to them.
"""

from __future__ import annotations

import json
import ssl
import tomllib
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from . import layout
from .components import Context
from .layout import LOCAL_1, LocalCluster

FLEET_FILE = layout.LOCAL_DIR / LOCAL_1.fleet_file
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def gpu_node(
    name: str,
    *,
    product: str,
    gpus: int,
    zone: str,
    cpu: str = "192",
    memory: str = "2Ti",
    labels: dict[str, str] | None = None,
    pod_cidr: str | None = None,
) -> dict[str, Any]:
    """A kwok-managed GPU node as the GPU operator would label it.

    kwok gives the node's pods addresses from `pod_cidr` when set.
    """
    resources = {"cpu": cpu, "memory": memory, "pods": "110", "nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake"},
            "labels": {
                "type": "kwok",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "topology.kubernetes.io/zone": zone,
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.product": product,
                "nvidia.com/gpu.count": str(gpus),
                **(labels or {}),
            },
        },
        "spec": {"taints": [GPU_TAINT], **({"podCIDR": pod_cidr} if pod_cidr else {})},
        "status": {"capacity": resources, "allocatable": resources},
    }


def cpu_node(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A kwok-managed node without GPUs or taints: where platform pods schedule."""
    resources = {"cpu": "32", "memory": "128Gi", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake"},
            "labels": {
                "type": "kwok",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                **(labels or {}),
            },
        },
        "status": {"capacity": resources, "allocatable": resources},
    }


def node_manifests(fleet_file: Path = FLEET_FILE) -> list[dict[str, Any]]:
    fleet = tomllib.loads(fleet_file.read_text())
    region = fleet.get("region", "local-1")
    first_octet = fleet.get("pod_cidr_first_octet", 64)
    nodes = [
        (pool, zone, index)
        for pool in fleet["pool"]
        for zone in pool["zones"]
        for index in range(pool["count"])
    ]
    return [
        _shared(
            gpu_node(
                f"{pool['name']}-{zone}-{index}",
                product=pool["gpu_product"],
                gpus=pool["gpus"],
                zone=zone,
                cpu=pool["cpu"],
                memory=pool["memory"],
                labels={
                    "node.kubernetes.io/instance-type": pool["instance_type"],
                    "topology.kubernetes.io/region": region,
                    "nvidia.com/gpu.memory": str(pool["gpu_memory_mib"]),
                    "nvidia.com/gpu.family": pool["gpu_family"],
                    "gpucloud.io/node-pool": pool["name"],
                },
                pod_cidr=layout.fleet_pod_cidr(position, first_octet),
            ),
            pool,
        )
        for position, (pool, zone, index) in enumerate(nodes)
    ]


def _shared(node: dict[str, Any], pool: dict[str, Any]) -> dict[str, Any]:
    """`node` as the device plugin and GPU feature discovery show a pool's shared GPUs:
    MIG instances per profile (`mig`), or time-sliced replicas (`time_slicing_replicas`).
    Either way no whole GPU is left to request; `nvidia.com/gpu.count` still counts the
    physical ones."""
    labels = node["metadata"]["labels"]
    shared: dict[str, str] = {}
    if mig := pool.get("mig"):
        labels |= {"nvidia.com/mig.capable": "true", "nvidia.com/mig.strategy": "mixed"}
        for profile, count in mig.items():
            shared[f"nvidia.com/mig-{profile}"] = str(count)
            labels[f"nvidia.com/mig-{profile}.count"] = str(count)
    elif replicas := pool.get("time_slicing_replicas"):
        labels |= {
            "nvidia.com/gpu.product": f"{pool['gpu_product']}-SHARED",
            "nvidia.com/gpu.replicas": str(replicas),
            "nvidia.com/gpu.sharing-strategy": "time-slicing",
        }
        shared["nvidia.com/gpu.shared"] = str(pool["gpus"] * replicas)
    if shared:
        for amounts in (node["status"]["capacity"], node["status"]["allocatable"]):
            amounts |= {"nvidia.com/gpu": "0", **shared}
    return node


#: The local cluster's storage class for volume storages. Nothing provisions it
#: (kwok has no disks): a claim binds to a PersistentVolume someone created.
STORAGE_CLASS: dict[str, Any] = {
    "apiVersion": "storage.k8s.io/v1",
    "kind": "StorageClass",
    "metadata": {"name": "gpucloud-standard"},
    "provisioner": "kubernetes.io/no-provisioner",
    "volumeBindingMode": "Immediate",
    "allowVolumeExpansion": True,
}


def _create(ctx: Context, cluster: LocalCluster, path: str, manifest: dict[str, Any]) -> bool:
    """POST `manifest` to `cluster`; False when it already exists."""
    tls = ssl.create_default_context(cafile=str(ctx.pki / "ca.crt"))
    request = urllib.request.Request(
        f"{cluster.server}{path}",
        data=json.dumps(manifest).encode(),
        method="POST",
        headers={
            "Authorization": f"Bearer {ctx.secrets.kube_admin_token}",
            "Content-Type": "application/json",
        },
    )
    try:
        with urllib.request.urlopen(request, context=tls, timeout=10):
            return True
    except urllib.error.HTTPError as error:
        if error.code != 409:  # 409: it exists already
            raise
    return False


def register(ctx: Context, cluster: LocalCluster = LOCAL_1) -> int:
    """Create `cluster`'s nodes and storage class that do not exist yet; returns the
    number of nodes created."""
    _create(ctx, cluster, "/apis/storage.k8s.io/v1/storageclasses", STORAGE_CLASS)
    nodes = node_manifests(layout.LOCAL_DIR / cluster.fleet_file)
    return sum(_create(ctx, cluster, "/api/v1/nodes", node) for node in nodes)
