"""Kubernetes objects of a tenant's namespace: the namespace, its quota, limits, network policy and role bindings."""

from __future__ import annotations

import ipaddress
from typing import Any

from gpucloud_libs.gpu_shares import MAX_TIME_SLICING_REPLICAS

from ..manifests import GPU_RESOURCE, MANAGED, Manifest


def role_binding(namespace_name: str, role: str, subject: str) -> Manifest:
    """Grant ClusterRole `role` in this namespace only to `subject`, written
    `User:<name>` or `ServiceAccount:<namespace>:<name>`."""
    kind, _, rest = subject.partition(":")
    if kind == "ServiceAccount":
        account_namespace, _, name = rest.partition(":")
        who = {"kind": kind, "name": name, "namespace": account_namespace}
    else:
        who = {"kind": kind, "name": rest, "apiGroup": "rbac.authorization.k8s.io"}
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": role, "namespace": namespace_name, "labels": {MANAGED: "true"}},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [who],
    }


def resource_quota(
    namespace_name: str, *, gpus: int, instances: int, cpu: str, memory: str
) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "gpucloud-quota", "namespace": namespace_name},
        "spec": {
            "hard": {
                f"requests.{GPU_RESOURCE}": str(gpus),
                "requests.cpu": cpu,
                "requests.memory": memory,
                # A pod holds a GPU, or a share of one: a GPU of quota stands for as
                # many pods as one GPU can be shared among (seven MIG slices, up to
                # 64 time-sliced replicas). Shared units themselves are not listed:
                # the quota ledger counts them at their weight (decision 121).
                "pods": str(instances + gpus * MAX_TIME_SLICING_REPLICAS),
            }
        },
    }


def limit_range(namespace_name: str) -> Manifest:
    """Defaults for containers that state no resources, so the quota can count them."""
    return {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": {"name": "gpucloud-defaults", "namespace": namespace_name},
        "spec": {
            "limits": [
                {
                    "type": "Container",
                    "default": {"cpu": "1", "memory": "2Gi"},
                    "defaultRequest": {"cpu": "500m", "memory": "1Gi"},
                }
            ]
        },
    }


def network_policy(
    namespace_name: str, *, gateway_namespace: str, dns_namespace: str, denied_cidrs: list[str]
) -> Manifest:
    """Default deny both ways for every pod of a tenant.

    In: only the gateway (which serves instance URLs after authenticating the
    caller) and the tenant's own pods. Out: the tenant's own pods, the cluster's
    DNS, and addresses outside `denied_cidrs`, which hold the private, loopback,
    link-local (cloud metadata) and shared ranges, plus the cluster's own ranges
    the operator lists. So a tenant's workload reaches the internet, and nothing
    of the platform: not Kafka, the database, the object store's admin API, the
    services, the Kubernetes API, the metadata address or another tenant.
    """

    def namespace(name: str) -> dict[str, Any]:
        return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": name}}}

    dns = {**namespace(dns_namespace), "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "gpucloud-tenant-isolation", "namespace": namespace_name},
        "spec": {
            "podSelector": {},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [namespace(gateway_namespace), {"podSelector": {}}]}],
            "egress": [
                {"to": [{"podSelector": {}}]},
                {"to": [dns], "ports": [{"protocol": p, "port": 53} for p in ("UDP", "TCP")]},
                {"to": _public_blocks(denied_cidrs)},
            ],
        },
    }


def _public_blocks(denied_cidrs: list[str]) -> list[dict[str, Any]]:
    """Everything, per address family, except the denied ranges of that family."""
    networks = [ipaddress.ip_network(cidr) for cidr in denied_cidrs]
    return [
        {
            "ipBlock": {
                "cidr": everything,
                "except": [str(net) for net in networks if net.version == version],
            }
        }
        for version, everything in ((4, "0.0.0.0/0"), (6, "::/0"))
    ]
