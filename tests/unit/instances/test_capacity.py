"""How the controller counts the fleet's GPUs (controller/capacity.py): in usable
nodes, free on them, and held per tenant; and which nodes could ever hold a pod."""

from __future__ import annotations

from typing import Any

from gpucloud_instances.controller.capacity import gpu_accounting, nodes_that_fit
from gpucloud_libs.naming import GPU_PRODUCT_LABEL, TENANT_LABEL
from gpucloud_stack.fleet import gpu_node

H100 = "NVIDIA-H100-80GB-HBM3"
L40S = "NVIDIA-L40S"


def pod(tenant: str, gpus: int, *, gpu_type: str = H100, node: str | None = None) -> Any:
    """A pod as the controller makes one: its GPUs asked of one GPU type."""
    return {
        "metadata": {"name": f"p-{tenant}-{gpus}-{node}", "labels": {TENANT_LABEL: tenant}},
        "spec": {
            "nodeSelector": {GPU_PRODUCT_LABEL: gpu_type},
            **({"nodeName": node} if node else {}),
            "containers": [{"resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}],
        },
    }


def workload(gpu_type: str, gpus: int, zones: list[str]) -> Any:
    return {
        "gpu_type": gpu_type,
        "gpu_count": gpus,
        "zones": zones,
        "gpu_resource": "nvidia.com/gpu",
    }


NODES = {
    "a1": gpu_node("a1", product=H100, gpus=8, zone="zone-a"),
    "a2": gpu_node("a2", product=H100, gpus=8, zone="zone-a"),
    "b1": gpu_node("b1", product=L40S, gpus=4, zone="zone-b"),
}


def test_free_gpus_are_counted_per_pool_and_node_and_held_per_tenant() -> None:
    live = [
        pod("acme", 3, node="a1"),
        pod("acme", 2, node="a2"),
        pod("zeta", 1, gpu_type=L40S, node="b1"),
    ]
    accounting = gpu_accounting(NODES, live)
    assert accounting.capacity == {H100: 16, L40S: 4}
    assert accounting.free == {H100: 11, L40S: 3}
    assert accounting.node_free == {H100: {"a1": 5, "a2": 6}, L40S: {"b1": 3}}
    assert accounting.held == {"acme": {H100: 5}, "zeta": {L40S: 1}}


def test_a_pod_waiting_for_a_node_takes_from_its_pool_but_from_no_node() -> None:
    accounting = gpu_accounting(NODES, [pod("acme", 4)])
    assert accounting.free[H100] == 12
    assert accounting.node_free[H100] == {"a1": 8, "a2": 8}
    assert accounting.held == {"acme": {H100: 4}}


def test_pods_on_unusable_nodes_count_for_nothing() -> None:
    """A cordoned or quarantined node is left out by the caller: its GPUs are in no
    pool, and its pods take from none."""
    usable = {name: node for name, node in NODES.items() if name != "a2"}
    accounting = gpu_accounting(usable, [pod("acme", 2, node="a2"), pod("acme", 1, node="a1")])
    assert accounting.capacity[H100] == 8
    assert accounting.free[H100] == 7
    assert accounting.held == {"acme": {H100: 1}}


def test_a_node_fits_by_type_count_and_zone_busy_or_not() -> None:
    nodes = list(NODES.values())
    assert nodes_that_fit(nodes, workload(H100, 8, [])) == 2
    assert nodes_that_fit(nodes, workload(H100, 9, [])) == 0
    assert nodes_that_fit(nodes, workload(H100, 1, ["zone-b"])) == 0
    assert nodes_that_fit(nodes, workload(L40S, 4, ["zone-b"])) == 1
