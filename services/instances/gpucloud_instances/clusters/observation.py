"""Looking at a cluster: whether its API server answers, its version, its nodes and
their GPUs; and whether a kubeconfig has the rights the platform needs there, read
from a SelfSubjectRulesReview (what `kubectl auth can-i --list` shows)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple

from gpucloud_libs.errors import DependencyUnavailable
from gpucloud_libs.kube import KubeClient, KubeError, Manifest

from .. import manifests
from ..controller.capacity import node_gpus
from .documents import ClusterGpusDoc, ClusterStatusDoc

#: A look that takes longer counts as no answer.
LOOK_TIMEOUT_S = 10.0


class Right(NamedTuple):
    group: str  # "" for the core API group
    resource: str
    verbs: tuple[str, ...]


#: What the platform does in a cluster it places workloads in: tenant namespaces and
#: their quota, limits and network policy; pods, services, Jobs, JobSets and
#: Deployments; image pull Secrets, written never read; node cordons; warm stocks'
#: priority class and nominations. The Helm chart's ClusterRole grants these (a unit
#: test holds the two together).
NEEDED_RIGHTS: tuple[Right, ...] = (
    Right("", "namespaces", ("get", "list", "watch", "create", "update", "patch", "delete")),
    Right("", "pods", ("get", "list", "watch", "create", "delete")),
    Right("", "pods/log", ("get",)),
    Right("", "pods/status", ("patch",)),
    Right("", "services", ("get", "create", "delete")),
    Right("", "resourcequotas", ("get", "create", "update", "patch")),
    Right("", "limitranges", ("get", "create", "update", "patch")),
    Right("", "secrets", ("create", "update", "delete")),
    Right("", "nodes", ("get", "list", "watch", "patch")),
    Right("networking.k8s.io", "networkpolicies", ("get", "create", "update", "patch")),
    Right("batch", "jobs", ("get", "list", "watch", "create", "delete")),
    Right("jobset.x-k8s.io", "jobsets", ("get", "list", "watch", "create", "delete")),
    Right("apps", "deployments", ("get", "list", "watch", "create", "patch", "delete")),
    Right("scheduling.k8s.io", "priorityclasses", ("get", "create")),
    Right("rbac.authorization.k8s.io", "rolebindings", ("get", "create", "update", "patch")),
)


def missing_rights(rules: list[dict[str, Any]]) -> list[str]:
    """The needed rights `rules` (a SelfSubjectRulesReview's resourceRules) do not
    grant, as `verb group/resource`. A rule limited to some objects by name grants
    nothing here: the platform names its own objects."""
    missing = []
    for right in NEEDED_RIGHTS:
        for verb in right.verbs:
            if not any(_grants(rule, right.group, right.resource, verb) for rule in rules):
                group = f"{right.group}/" if right.group else ""
                missing.append(f"{verb} {group}{right.resource}")
    return missing


#: Rights a registered cluster's kubeconfig must not hold (review L3): reading Secrets,
#: acting as another, granting what it does not hold, binding anything cluster-wide.
EXCESS_RIGHTS: tuple[Right, ...] = (
    Right("", "secrets", ("get", "list", "watch")),
    Right("", "users", ("impersonate",)),
    Right("", "groups", ("impersonate",)),
    Right("", "serviceaccounts", ("impersonate",)),
    Right("rbac.authorization.k8s.io", "clusterroles", ("escalate", "bind")),
    Right("rbac.authorization.k8s.io", "roles", ("escalate", "bind")),
    Right("rbac.authorization.k8s.io", "clusterrolebindings", ("create", "update", "patch")),
)


def excess_rights(rules: list[dict[str, Any]]) -> list[str]:
    """The rights `rules` grant that the platform must not hold (`EXCESS_RIGHTS`), as
    `verb group/resource`; one limited to some objects by name is the chart's own
    (binding its two roles) and not counted."""
    return [
        f"{verb} {right.group + '/' if right.group else ''}{right.resource}"
        for right in EXCESS_RIGHTS
        for verb in right.verbs
        if any(_grants(rule, right.group, right.resource, verb) for rule in rules)
    ]


def _grants(rule: dict[str, Any], group: str, resource: str, verb: str) -> bool:
    if rule.get("resourceNames"):
        return False
    return (
        _has(rule.get("apiGroups"), group)
        and _has(rule.get("resources"), resource)
        and _has(rule.get("verbs"), verb)
    )


def _has(values: list[str] | None, wanted: str) -> bool:
    return bool(values) and ("*" in values or wanted in values)  # type: ignore[operator]


async def rights_review(kube: KubeClient) -> tuple[list[dict[str, Any]], bool]:
    """The kubeconfig's rules in a namespace (cluster-wide grants show in any), and
    whether the authorizer could list them all."""
    review = await kube.create(
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectRulesReview",
            "spec": {"namespace": "default"},
        }
    )
    status = review.get("status", {})
    return status.get("resourceRules") or [], bool(status.get("incomplete"))


def summary(nodes: Sequence[Manifest], version: str, at: datetime) -> ClusterStatusDoc:
    """What the cluster's nodes say: how many, how many Ready, their zones, and the
    GPU units on the Ready ones by type and kind."""
    ready = [node for node in nodes if _ready(node)]
    zones = sorted(
        {
            zone
            for node in nodes
            if (zone := node["metadata"].get("labels", {}).get(manifests.ZONE_LABEL))
        }
    )
    units: dict[tuple[str, str], int] = {}
    for node in ready:
        gpu_type = node["metadata"].get("labels", {}).get(manifests.GPU_PRODUCT_LABEL)
        if not gpu_type:
            continue
        for resource, count in node_gpus(node).items():
            units[gpu_type, resource] = units.get((gpu_type, resource), 0) + count
    gpus = [
        ClusterGpusDoc(gpu_type=gpu_type, resource=resource, capacity=count)
        for (gpu_type, resource), count in sorted(units.items())
        if count  # a node advertising a kind at 0 (shared GPUs hide their whole ones)
    ]
    return ClusterStatusDoc(
        reachable=True, checked_at=at, unreachable_since=None, version=version,
        nodes=len(nodes), ready_nodes=len(ready), zones=zones, gpus=gpus, error=None,
    )  # fmt: skip


def unreachable(error: str, at: datetime, previous: ClusterStatusDoc | None) -> ClusterStatusDoc:
    """No answer: what was last seen stays, marked unreachable since the first miss."""
    since = previous["unreachable_since"] if previous and not previous["reachable"] else None
    if previous is None:
        return ClusterStatusDoc(
            reachable=False, checked_at=at, unreachable_since=at, version=None, nodes=0,
            ready_nodes=0, zones=[], gpus=[], error=error,
        )  # fmt: skip
    return {
        **previous, "reachable": False, "checked_at": at, "unreachable_since": since or at,
        "error": error,
    }  # fmt: skip


async def look(
    kube: KubeClient,
    at: datetime,
    previous: ClusterStatusDoc | None,
    nodes: Sequence[Manifest] | None = None,
) -> ClusterStatusDoc:
    """Ask the cluster's API server for its version and nodes (unless a watch already
    holds them: `nodes`), within `LOOK_TIMEOUT_S`."""
    try:
        async with asyncio.timeout(LOOK_TIMEOUT_S):
            version = await kube.server_version()
            if nodes is None:
                nodes, _ = await kube.list("Node")
    except TimeoutError:
        return unreachable(f"no answer within {LOOK_TIMEOUT_S:.0f}s", at, previous)
    except KubeError as error:
        # Its status alone: an answer's body is the server's to say, not ours to
        # repeat (review N2: a registered server may be anything that answers).
        return unreachable(
            f"the API server answered {error.status or 'with an error'}", at, previous
        )
    except DependencyUnavailable as error:
        return unreachable(
            f"the API server did not answer ({type(error.__cause__).__name__})", at, previous
        )
    return summary(nodes, version, at)


async def cluster_uid(kube: KubeClient) -> str:
    """The cluster's identity: its kube-system namespace's uid, which lives as long
    as the cluster (what tools that tell clusters apart read)."""
    namespace = await kube.read("Namespace", None, "kube-system")
    return str(namespace["metadata"]["uid"])


def _ready(node: Manifest) -> bool:
    conditions = node.get("status", {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
