"""The embedded cluster: real kube-apiserver and kube-scheduler, kwok GPU nodes."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from kubernetes_asyncio import client as k8s

from .support import eventually, unique

H100 = "NVIDIA-H100-80GB-HBM3"


def gpu_pod(name: str, gpus: int, product: str) -> k8s.V1Pod:
    return k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name=name, labels={"app": "gpu-smoke"}),
        spec=k8s.V1PodSpec(
            containers=[
                k8s.V1Container(
                    name="cuda",
                    image="nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
                    resources=k8s.V1ResourceRequirements(limits={"nvidia.com/gpu": str(gpus)}),
                )
            ],
            node_selector={"nvidia.com/gpu.product": product},
            tolerations=[
                k8s.V1Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")
            ],
        ),
    )


@pytest.fixture
async def namespace(kube: k8s.ApiClient) -> AsyncIterator[str]:
    core = k8s.CoreV1Api(kube)
    name = unique("smoke")
    await core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name)))
    yield name
    await core.delete_namespace(name)


async def test_fleet_has_gpu_nodes_in_two_zones(kube: k8s.ApiClient) -> None:
    # The stack's fleet (deploy/local/fleet.toml): every node it registers names its pool.
    # Nodes a benchmark adds for itself are not the fleet.
    fleet = "type=kwok,gpucloud.io/node-pool"
    nodes = (await k8s.CoreV1Api(kube).list_node(label_selector=fleet)).items
    products = {node.metadata.labels["nvidia.com/gpu.product"] for node in nodes}
    zones = {node.metadata.labels["topology.kubernetes.io/zone"] for node in nodes}
    assert products == {H100, "NVIDIA-A100-SXM4-40GB", "NVIDIA-L40S", "NVIDIA-L40S-SHARED"}
    assert zones == {"zone-a", "zone-b"}
    shared = {}
    for node in nodes:
        ready = {c.type: c.status for c in node.status.conditions}["Ready"]
        assert ready == "True", node.metadata.name
        allocatable = node.status.allocatable
        if allocatable["nvidia.com/gpu"] == "0":  # every GPU is shared out
            shared[node.metadata.name] = {k: v for k, v in allocatable.items() if "nvidia" in k}
        else:
            assert allocatable["nvidia.com/gpu"] in {"4", "8"}
    # As the device plugin advertises MIG (mixed strategy) and time-slicing.
    assert shared == {
        "a100-mig-zone-a-0": {
            "nvidia.com/gpu": "0", "nvidia.com/mig-1g.5gb": "28", "nvidia.com/mig-3g.20gb": "8"
        },
        "l40s-shared-zone-a-0": {"nvidia.com/gpu": "0", "nvidia.com/gpu.shared": "16"},
    }  # fmt: skip


async def test_eight_gpu_pod_is_scheduled_on_h100_and_runs(
    kube: k8s.ApiClient, namespace: str
) -> None:
    core = k8s.CoreV1Api(kube)
    await core.create_namespaced_pod(namespace, gpu_pod("train", 8, H100))

    async def running() -> k8s.V1Pod | None:
        pod = await core.read_namespaced_pod("train", namespace)
        return pod if pod.status.phase == "Running" else None

    pod = await eventually(running, timeout=60)
    node = await core.read_node(pod.spec.node_name)
    assert node.metadata.labels["nvidia.com/gpu.product"] == H100
    assert node.status.allocatable["nvidia.com/gpu"] == "8"


async def test_pod_asking_more_gpus_than_any_node_stays_pending(
    kube: k8s.ApiClient, namespace: str
) -> None:
    core = k8s.CoreV1Api(kube)
    await core.create_namespaced_pod(namespace, gpu_pod("too-big", 16, H100))

    async def failed_scheduling() -> list[k8s.CoreV1Event]:
        events = await core.list_namespaced_event(
            namespace, field_selector="involvedObject.name=too-big,reason=FailedScheduling"
        )
        return list(events.items)

    [event, *_] = await eventually(failed_scheduling, timeout=60)
    assert "nvidia.com/gpu" in event.message
    pod = await core.read_namespaced_pod("too-big", namespace)
    assert pod.status.phase == "Pending"
    assert pod.spec.node_name is None
