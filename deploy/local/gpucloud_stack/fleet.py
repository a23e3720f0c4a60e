"""Registers the fake GPU nodes of deploy/local/fleet.toml with the API server.

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
from .layout import HOST, PORTS

FLEET_FILE = layout.LOCAL_DIR / "fleet.toml"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def node_manifests(fleet_file: Path = FLEET_FILE) -> list[dict[str, Any]]:
    fleet = tomllib.loads(fleet_file.read_text())
    region = fleet.get("region", "local-1")
    nodes: list[dict[str, Any]] = []
    for pool in fleet["pool"]:
        for zone in pool["zones"]:
            for index in range(pool["count"]):
                name = f"{pool['name']}-{zone}-{index}"
                resources = {
                    "cpu": pool["cpu"],
                    "memory": pool["memory"],
                    "pods": "110",
                    "nvidia.com/gpu": str(pool["gpus"]),
                }
                nodes.append(
                    {
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
                                "node.kubernetes.io/instance-type": pool["instance_type"],
                                "topology.kubernetes.io/region": region,
                                "topology.kubernetes.io/zone": zone,
                                "nvidia.com/gpu.present": "true",
                                "nvidia.com/gpu.product": pool["gpu_product"],
                                "nvidia.com/gpu.memory": str(pool["gpu_memory_mib"]),
                                "nvidia.com/gpu.count": str(pool["gpus"]),
                                "nvidia.com/gpu.family": pool["gpu_family"],
                                "gpucloud.io/node-pool": pool["name"],
                            },
                        },
                        "spec": {"taints": [GPU_TAINT]},
                        "status": {"capacity": resources, "allocatable": resources},
                    }
                )
    return nodes


def register(ctx: Context) -> int:
    """Create the fleet's nodes that do not exist yet; returns how many were created."""
    tls = ssl.create_default_context(cafile=str(ctx.pki / "ca.crt"))
    created = 0
    for node in node_manifests():
        request = urllib.request.Request(
            f"https://{HOST}:{PORTS.kube_apiserver}/api/v1/nodes",
            data=json.dumps(node).encode(),
            method="POST",
            headers={
                "Authorization": f"Bearer {ctx.secrets.kube_admin_token}",
                "Content-Type": "application/json",
            },
        )
        try:
            with urllib.request.urlopen(request, context=tls, timeout=10):
                created += 1
        except urllib.error.HTTPError as error:
            if error.code != 409:  # 409: the node is already registered
                raise
    return created
