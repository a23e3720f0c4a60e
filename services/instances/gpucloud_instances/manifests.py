"""Kubernetes objects the instances service owns, built as plain JSON dicts.

Pure functions: no client, no I/O. Names are deterministic so that a retried
or restarted reconcile finds what an earlier attempt created.
"""

from __future__ import annotations

from typing import Any

from gpucloud_libs import naming
from gpucloud_libs.gpu_shares import SHARED_GPU_RESOURCE, SHARING_LABEL

from .schemas import InstanceTemplate, is_device_selector

Manifest = dict[str, Any]


MANAGED = naming.MANAGED_LABEL


TENANT = naming.TENANT_LABEL


INSTANCE = naming.INSTANCE_LABEL


JOB = naming.JOB_LABEL


SERVICE = naming.SERVICE_LABEL


#: On an inference service's pod template: the service's revision it runs.
REVISION = "gpucloud.io/revision"


SPEC = "gpucloud.io/spec"


STOCK = "gpucloud.io/stock"


#: On an instance pod bound to the node of the warm unit it claimed; the annotation
#: names the unit, whose hold goes once the pod is seen.
FROM_STOCK = "gpucloud.io/from-stock"


STOCK_UNIT = "gpucloud.io/stock-unit"


#: A warm unit's hold pod: the label, and the scheduling gate that keeps it unbound.
STOCK_HOLD = "gpucloud.io/stock-hold"


HEALTH = "gpucloud.io/health"


GPU_RESOURCE = naming.GPU_RESOURCE


GPU_PRODUCT_LABEL = naming.GPU_PRODUCT_LABEL


ZONE_LABEL = naming.ZONE_LABEL


GPU_TOLERATION = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}


INSTANCE_PRIORITY_CLASS = "gpucloud-instance"


STOCK_PRIORITY_CLASS = "gpucloud-stock"


_RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
    "pod-security.kubernetes.io/warn": "restricted",
    "pod-security.kubernetes.io/audit": "restricted",
}


def priority_classes() -> list[Manifest]:
    return [
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": INSTANCE_PRIORITY_CLASS},
            "value": 1000,
            "description": "gpucloud tenant instances; preempt warm-stock placeholders.",
        },
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": STOCK_PRIORITY_CLASS},
            "value": -100,
            "preemptionPolicy": "Never",
            "description": "gpucloud warm-stock placeholders: hold capacity until an instance claims it.",
        },
    ]


def namespace(name: str, labels: dict[str, str]) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {MANAGED: "true", **_RESTRICTED, **labels}},
    }


def _placement(
    gpu_type: str, zones: list[str], node: str | None, sole_tenant: str | None = None
) -> dict[str, Any]:
    """Where a workload's pods may go. `sole_tenant`: its GPUs are time-sliced, and the
    node's must serve that tenant alone (time-slicing does not fence memory)."""
    terms: list[dict[str, Any]] = [
        {"key": HEALTH, "operator": "NotIn", "values": ["quarantined"]},
    ]
    if zones:
        terms.append({"key": ZONE_LABEL, "operator": "In", "values": zones})
    placement: dict[str, Any] = {"nodeName": node} if node else {}
    affinity: dict[str, Any] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": terms}]
            }
        }
    }
    if sole_tenant is not None:
        # No node holding another tenant's time-sliced pod, in any namespace. The
        # scheduler also checks the pods already there against this one, so the rule
        # holds both ways.
        affinity["podAntiAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "topologyKey": "kubernetes.io/hostname",
                    "namespaceSelector": {},
                    "labelSelector": {
                        "matchExpressions": [
                            {"key": SHARING_LABEL, "operator": "Exists"},
                            {"key": TENANT, "operator": "NotIn", "values": [sole_tenant]},
                        ]
                    },
                }
            ]
        }
    return placement | {
        "nodeSelector": {GPU_PRODUCT_LABEL: gpu_type},
        "tolerations": [GPU_TOLERATION],
        "affinity": affinity,
    }


def placement_zones(pod: Manifest) -> list[str]:
    """The zones `_placement` limited a pod to; empty: any zone."""
    affinity = pod.get("spec", {}).get("affinity") or {}
    required = affinity.get("nodeAffinity", {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution", {}
    )
    return [
        zone
        for term in required.get("nodeSelectorTerms") or []
        for expression in term.get("matchExpressions") or []
        if expression.get("key") == ZONE_LABEL and expression.get("operator") == "In"
        for zone in expression.get("values") or []
    ]


def _resources(cpu: str, memory: str, gpus: int, gpu_resource: str = GPU_RESOURCE) -> Manifest:
    amounts = {"cpu": cpu, "memory": memory, gpu_resource: str(gpus)}
    return {"requests": amounts, "limits": amounts}


def _sharing_labels(gpu_resource: str) -> dict[str, str]:
    return {SHARING_LABEL: "time-sliced"} if gpu_resource == SHARED_GPU_RESOURCE else {}


_CONTAINER_SECURITY = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}


def _workload_container(
    image: str,
    template: InstanceTemplate,
    cpu: str,
    memory: str,
    gpus: tuple[str, int],
    storage_secrets: list[tuple[str, str]] | None,
    *,
    command: list[str] | None = None,
    args: list[str] | None = None,
) -> dict[str, Any]:
    """The tenant's container, as instances, jobs and inference services run it; the
    image's own entrypoint unless `command` or `args` replace it."""
    container: dict[str, Any] = {
        "name": "workload",
        "image": image,
        # Every start asks the registry with this tenant's own pull secret: an image
        # another tenant's credentials pulled onto the node is not this tenant's to
        # run (review H3). Its layers stay cached, so a warm node pulls no bytes.
        "imagePullPolicy": "Always",
        # A record stored before device selectors were refused still never passes one
        # to a pod: the device plugin alone chooses the GPUs (review H1).
        "env": [
            {"name": env.name, "value": env.value}
            for env in template.envs
            if not is_device_selector(env.name)
        ],
        "resources": _resources(cpu, memory, gpus[1], gpus[0]),
        "securityContext": _CONTAINER_SECURITY,
        "volumeMounts": [
            {"name": volume.name, "mountPath": volume.mount_path, "readOnly": volume.read_only}
            for volume in template.volumes
        ],
    }
    if command:
        container["command"] = command
    if args:
        container["args"] = args
    if storage_secrets:
        # The first object storage also without a prefix: S3 SDKs read AWS_* unconfigured.
        # The template's own `envs` win over both (Kubernetes: env overrides envFrom).
        first_secret = storage_secrets[0][0]
        container["envFrom"] = [{"secretRef": {"name": first_secret}}] + [
            {"prefix": prefix, "secretRef": {"name": secret}} for secret, prefix in storage_secrets
        ]
    return container


def _workload_pod_spec(
    container: dict[str, Any],
    template: InstanceTemplate,
    restart_policy: str,
    gpu_type: str,
    zones: list[str],
    node: str | None,
    pull_secrets: list[str],
    sole_tenant: str | None = None,
) -> Manifest:
    volumes = [
        {"name": volume.name, "persistentVolumeClaim": {"claimName": volume.claim_name}}
        if volume.claim_name
        else {"name": volume.name, "emptyDir": {}}
        for volume in template.volumes
    ]
    return {
        "priorityClassName": INSTANCE_PRIORITY_CLASS,
        "restartPolicy": restart_policy,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {
            "runAsNonRoot": True,
            "seccompProfile": {"type": "RuntimeDefault"},
            **({"runAsUser": template.run_as_user} if template.run_as_user else {}),
        },
        "containers": [container],
        "volumes": volumes,
        **({"imagePullSecrets": [{"name": name} for name in pull_secrets]} if pull_secrets else {}),
        **_placement(gpu_type, zones, node, sole_tenant),
    }


def _sole_tenant(gpu_resource: str, tenant_id: str) -> str | None:
    return tenant_id if gpu_resource == SHARED_GPU_RESOURCE else None


HOLD_SUFFIX = "-hold"
