"""Kubernetes objects of an inference service: its Deployment."""

from __future__ import annotations

from ..manifests import (
    GPU_RESOURCE,
    MANAGED,
    REVISION,
    SERVICE,
    SPEC,
    TENANT,
    ZONE_LABEL,
    Manifest,
    _sharing_labels,
    _sole_tenant,
    _workload_container,
    _workload_pod_spec,
)
from ..schemas import InstanceTemplate


def deployment_name(service_id: str) -> str:
    return f"isvc-{service_id}"


#: A replica being removed keeps serving what it has for this long after the
#: gateway stops sending it requests (it sees the pod terminating at once).
REPLICA_DRAIN_S = 5


#: How long a replica on an unreachable or not-ready node is kept before Kubernetes
#: evicts it and the Deployment starts a replacement (Kubernetes' default: 300 s).
LOST_NODE_TOLERATION_S = 30


def inference_deployment(
    *,
    namespace_name: str,
    tenant_id: str,
    service_id: str,
    spec_name: str,
    revision: int,
    image: str,
    command: list[str] | None,
    args: list[str] | None,
    template: InstanceTemplate,
    port: int,
    readiness_path: str,
    cpu: str,
    memory: str,
    gpus: int,
    gpu_type: str,
    zones: list[str],
    replicas: int,
    max_surge: int,
    max_unavailable: int,
    storage_secrets: list[tuple[str, str]] | None = None,
    pull_secrets: list[str] | None = None,
    gpu_resource: str = GPU_RESOURCE,
) -> Manifest:
    """An inference service as a Kubernetes Deployment: Kubernetes' own controllers
    roll a new revision out under the strategy and replace lost replicas. Replicas
    prefer distinct nodes and zones, avoid quarantined nodes like every workload,
    and drain for REPLICA_DRAIN_S before they stop."""
    container = _workload_container(
        image, template, cpu, memory, (gpu_resource, gpus), storage_secrets, command=command,
        args=args,
    )  # fmt: skip
    container["ports"] = [{"containerPort": port, "protocol": "TCP", "name": "serve"}]
    container["readinessProbe"] = {
        "httpGet": {"port": port, "path": readiness_path},
        "periodSeconds": 2,
        "failureThreshold": 2,
    }
    container["lifecycle"] = {"preStop": {"sleep": {"seconds": REPLICA_DRAIN_S}}}
    selector = {TENANT: tenant_id, SERVICE: service_id}
    pod_spec = _workload_pod_spec(
        container,
        template,
        "Always",
        gpu_type,
        zones,
        None,
        pull_secrets or [],
        _sole_tenant(gpu_resource, tenant_id),
    )
    pod_spec["terminationGracePeriodSeconds"] = REPLICA_DRAIN_S + 25
    pod_spec["topologySpreadConstraints"] = [
        {
            "maxSkew": 1,
            "topologyKey": key,
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": selector},
        }
        for key in ("kubernetes.io/hostname", ZONE_LABEL)
    ]
    # The spread above is one score among the scheduler's others (free resources,
    # images), and replicas created at once could still share a node; a strongly
    # weighted preference against a sibling on the same node keeps them apart while
    # nodes allow, and never blocks a replica when they do not.
    pod_spec["affinity"].setdefault("podAntiAffinity", {})[
        "preferredDuringSchedulingIgnoredDuringExecution"
    ] = [
        {
            "weight": 100,
            "podAffinityTerm": {
                "topologyKey": "kubernetes.io/hostname",
                "labelSelector": {"matchLabels": selector},
            },
        }
    ]
    pod_spec["tolerations"] = [
        *pod_spec["tolerations"],
        *(
            {"key": taint, "operator": "Exists", "effect": "NoExecute",
             "tolerationSeconds": LOST_NODE_TOLERATION_S}
            for taint in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
        ),
    ]  # fmt: skip
    labels = {MANAGED: "true", **selector}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": deployment_name(service_id),
            "namespace": namespace_name,
            "labels": labels,
        },
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": selector},
            "revisionHistoryLimit": 2,  # gpucloud keeps the revisions (ServiceConfigDoc)
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": max_surge, "maxUnavailable": max_unavailable},
            },
            "template": {
                "metadata": {
                    "labels": {
                        **labels,
                        SPEC: spec_name,
                        REVISION: str(revision),
                        **_sharing_labels(gpu_resource),
                    }
                },
                "spec": pod_spec,
            },
        },
    }
