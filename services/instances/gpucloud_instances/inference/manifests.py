"""Kubernetes objects of an inference service: its Deployment."""

from __future__ import annotations

from dataclasses import dataclass

from ..manifests import MANAGED, REVISION, SERVICE, ZONE_LABEL, Manifest, WorkloadPod


def deployment_name(service_id: str) -> str:
    return f"isvc-{service_id}"


#: A replica being removed keeps serving what it has for this long after the
#: gateway stops sending it requests (it sees the pod terminating at once).
REPLICA_DRAIN_S = 5


#: How long a replica on an unreachable or not-ready node is kept before Kubernetes
#: evicts it and the Deployment starts a replacement (Kubernetes' default: 300 s).
LOST_NODE_TOLERATION_S = 30


@dataclass(frozen=True)
class Serving:
    """Where a replica serves, and the path that answers 200 once it is ready."""

    port: int
    readiness_path: str


@dataclass(frozen=True)
class Rollout:
    """How many replicas run, and how a new revision replaces them."""

    replicas: int
    max_surge: int
    max_unavailable: int


def inference_deployment(
    pod: WorkloadPod, *, service_id: str, revision: int, serving: Serving, rollout: Rollout
) -> Manifest:
    """An inference service as a Kubernetes Deployment: Kubernetes' own controllers
    roll a new revision out under the strategy and replace lost replicas."""
    selector = pod.owner(SERVICE, service_id)
    labels = {MANAGED: "true", **selector}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": deployment_name(service_id),
            "namespace": pod.namespace_name,
            "labels": labels,
        },
        "spec": {
            "replicas": rollout.replicas,
            "selector": {"matchLabels": selector},
            "revisionHistoryLimit": 2,  # gpucloud keeps the revisions (ServiceConfigDoc)
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {
                    "maxSurge": rollout.max_surge,
                    "maxUnavailable": rollout.max_unavailable,
                },
            },
            "template": {
                "metadata": {"labels": {**pod.labels(selector), REVISION: str(revision)}},
                "spec": _replica_spec(pod, selector, serving),
            },
        },
    }


def _replica_spec(pod: WorkloadPod, selector: dict[str, str], serving: Serving) -> Manifest:
    """A replica: ready when its path answers, draining for REPLICA_DRAIN_S before it
    stops, on distinct nodes and zones while they allow, and off a lost node soon."""
    container = pod.container()
    container["ports"] = [{"containerPort": serving.port, "protocol": "TCP", "name": "serve"}]
    container["readinessProbe"] = {
        "httpGet": {"port": serving.port, "path": serving.readiness_path},
        "periodSeconds": 2,
        "failureThreshold": 2,
    }
    container["lifecycle"] = {"preStop": {"sleep": {"seconds": REPLICA_DRAIN_S}}}
    spec = pod.spec(container, restart_policy="Always")
    spec["terminationGracePeriodSeconds"] = REPLICA_DRAIN_S + 25
    spec["topologySpreadConstraints"] = [
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
    spec["affinity"].setdefault("podAntiAffinity", {})[
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
    spec["tolerations"] = [
        *spec["tolerations"],
        *(
            {"key": taint, "operator": "Exists", "effect": "NoExecute",
             "tolerationSeconds": LOST_NODE_TOLERATION_S}
            for taint in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
        ),
    ]  # fmt: skip
    return spec
