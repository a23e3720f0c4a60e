"""Kubernetes objects of warm stocks: placeholder pods and the holds that keep an armed unit's GPUs."""

from __future__ import annotations

from gpucloud_libs.gpu_shares import GpuShare

from ..documents import SpecDoc
from ..manifests import (
    CONTAINER_SECURITY,
    HOLD_SUFFIX,
    INSTANCE_PRIORITY_CLASS,
    MANAGED,
    STOCK,
    STOCK_HOLD,
    STOCK_PRIORITY_CLASS,
    Manifest,
    pod_placement,
    pod_resources,
)

PLACEHOLDER_IMAGE = "registry.k8s.io/pause:3.10"


#: A statically linked busybox: the one binary a pre-pull step can run in any image.
PREPULL_TOOL_IMAGE = "docker.io/library/busybox:1.37.0-musl"


PREPULL_DIR = "/gpucloud-prepull"


def placeholder_pod(
    namespace_name: str, name: str, spec: SpecDoc, images: list[str] | None = None
) -> Manifest:
    """A warm-stock placeholder of `spec`: finds a node for a unit at the lowest
    priority, and pulls the stock's `images` onto it before it runs (`_prepull`)."""
    resources = pod_resources(
        spec["cpu"], spec["memory"], spec["gpu_num"], GpuShare.of(spec).resource
    )
    pod = _stock_pod(namespace_name, name, {STOCK: spec["name"]}, STOCK_PRIORITY_CLASS, resources)
    zones = list(spec.get("zones") or [])
    pod["spec"] |= {**_prepull(images or []), **pod_placement(spec["gpu_type"], zones, None)}
    return pod


def hold_name(unit: str) -> str:
    return unit + HOLD_SUFFIX


def stock_hold_pod(
    *, namespace_name: str, unit: str, spec_name: str, resources: Manifest
) -> Manifest:
    """What holds a warm unit's GPUs once its placeholder has gone: a pod kept unbound
    by a scheduling gate, which the controller nominates to the unit's node.

    The scheduler counts a nominated pod's requests against its node for every pod of
    the same or lower priority (instances, jobs, services and placeholders alike); the
    kubelet never sees it. So an instance can be bound to the node at once, with
    nothing to delete first.
    """
    pod = _stock_pod(
        namespace_name, hold_name(unit), {STOCK: spec_name, STOCK_HOLD: "true"},
        INSTANCE_PRIORITY_CLASS, resources,
    )  # fmt: skip
    pod["spec"]["schedulingGates"] = [{"name": STOCK_HOLD}]
    return pod


def _stock_pod(
    namespace_name: str, name: str, labels: dict[str, str], priority_class: str, resources: Manifest
) -> Manifest:
    """What placeholders and holds share: one pause container asking for the unit."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace_name,
            "labels": {MANAGED: "true", **labels},
        },
        "spec": {
            "priorityClassName": priority_class,
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 0,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 65535,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "hold",
                    "image": PLACEHOLDER_IMAGE,
                    "resources": resources,
                    "securityContext": CONTAINER_SECURITY,
                }
            ],
        },
    }


def _prepull(images: list[str]) -> Manifest:
    """Init containers that make the kubelet pull each image, then exit at once.

    An image may have no shell and an entrypoint that never returns, so each one runs
    busybox's `true`, copied from a static busybox into a shared directory first. The
    placeholder runs (and its unit is offered) only once every image is on the node.
    """
    if not images:
        return {}
    mount = [{"name": "prepull", "mountPath": PREPULL_DIR}]
    tool = f"{PREPULL_DIR}/busybox"
    small = {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "16Mi"}}
    steps: list[Manifest] = [
        {
            "name": "prepull-tool",
            "image": PREPULL_TOOL_IMAGE,
            "command": ["/bin/busybox", "cp", "/bin/busybox", tool],
            "resources": small,
            "securityContext": CONTAINER_SECURITY,
            "volumeMounts": mount,
        }
    ]
    steps += [
        {
            "name": f"prepull-{index}",
            "image": image,
            "command": [tool, "true"],
            "resources": small,
            "securityContext": CONTAINER_SECURITY,
            "volumeMounts": mount,
        }
        for index, image in enumerate(images)
    ]
    return {
        "initContainers": steps,
        "volumes": [{"name": "prepull", "emptyDir": {"sizeLimit": "16Mi"}}],
    }
