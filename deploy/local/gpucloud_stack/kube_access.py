"""Least privilege on the local cluster: each service is a Kubernetes user of its own.

The same roles as the Helm chart's `templates/rbac.yaml` and
`templates/admission.yaml`, for the users of the stack's token file:
- instances manages namespaces, workloads (pods and batch Jobs) and node cordons; it may write only in
  the tenant namespaces (`gpc-*`) and its own two (the admission policy below
  refuses the rest), and it binds the storage role in each tenant namespace;
- storage holds claims and Secrets in tenant namespaces alone, through those
  RoleBindings: it cannot read a Secret anywhere else;
- monitoring and the GPU simulator read nodes and pods.
Applied with server-side apply at every `up`, so a change here reaches a running
cluster.
"""

from __future__ import annotations

import json
import ssl
import urllib.request
from pathlib import Path
from typing import Any

from . import layout
from .layout import HOST, PORTS

Manifest = dict[str, Any]

#: The services that talk to the Kubernetes API, each as user `gpucloud-<service>`.
KUBE_SERVICES = ("instances", "storage", "monitoring", "agent")
#: The namespaces the instances service keeps besides the tenants' (its settings).
INSTANCES_NAMESPACES = ("gpucloud-system", "gpucloud-stocks")
TENANT_STORAGE_ROLE = "gpucloud-tenant-storage"  # gpucloud_libs.naming

_RBAC = "rbac.authorization.k8s.io"
_ALL = ["get", "list", "watch", "create", "update", "patch", "delete"]
_READ = ["get", "list", "watch"]


def user(service: str) -> str:
    return f"gpucloud-{service}"


def _cluster_role(name: str, rules: list[Manifest]) -> Manifest:
    return {
        "apiVersion": f"{_RBAC}/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": rules,
    }


def _cluster_binding(role: str, users: list[str]) -> Manifest:
    return {
        "apiVersion": f"{_RBAC}/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": role},
        "roleRef": {"apiGroup": _RBAC, "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "User", "name": name, "apiGroup": _RBAC} for name in users],
    }


def manifests() -> list[Manifest]:
    instances = _cluster_role(
        "gpucloud-instances",
        [
            {"apiGroups": [""], "verbs": _ALL,
             "resources": ["namespaces", "pods", "services", "resourcequotas", "limitranges",
                           "events"]},
            {"apiGroups": [""], "resources": ["nodes"], "verbs": [*_READ, "patch"]},
            {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": _ALL},
            {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": _ALL},
            {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": _ALL},
            {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": _ALL},
            # Image pull Secrets only (the admission policy): written, never read.
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create", "update", "delete"]},
            {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
            # Nominates warm units' hold pods to their nodes (controller/stocks.py).
            {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]},
            {"apiGroups": ["scheduling.k8s.io"], "resources": ["priorityclasses"],
             "verbs": ["get", "list", "create"]},
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
             "verbs": ["get", "create", "update"]},
            {"apiGroups": [_RBAC], "resources": ["rolebindings"], "verbs": _ALL},
            # May grant the storage role (in the namespaces the policy allows), nothing else.
            {"apiGroups": [_RBAC], "resources": ["clusterroles"], "verbs": ["bind"],
             "resourceNames": [TENANT_STORAGE_ROLE]},
        ],
    )  # fmt: skip
    tenant_storage = _cluster_role(
        TENANT_STORAGE_ROLE,
        [{"apiGroups": [""], "resources": ["persistentvolumeclaims", "secrets"], "verbs": _ALL}],
    )
    readers = _cluster_role(
        "gpucloud-monitoring", [{"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": _READ}]
    )
    return [
        instances,
        _cluster_binding("gpucloud-instances", [user("instances")]),
        tenant_storage,
        readers,
        _cluster_binding("gpucloud-monitoring", [user("monitoring"), user("agent")]),
        *admission_policy(
            [user("instances"), user("storage")],
            INSTANCES_NAMESPACES,
            pull_secret_writer=user("instances"),
        ),
    ]


#: What an image pull Secret written by the instances service must be (CEL).
IMAGE_PULL_RULE = (
    "(has(request.name) && request.name.startsWith('gpc-registry-') && "
    "(request.operation == 'DELETE' || object.type == 'kubernetes.io/dockerconfigjson'))"
)


def admission_policy(
    users: list[str], own_namespaces: tuple[str, ...], *, pull_secret_writer: str
) -> list[Manifest]:
    """Writes by these users land in tenant namespaces (`gpc-*`) or the platform's
    own, and a namespace they make or delete is one of those: RBAC cannot say
    "namespaces named so", an admission policy can. The Secrets `pull_secret_writer`
    writes are image pull Secrets named `gpc-registry-*`, nothing else."""
    allowed = json.dumps(list(own_namespaces))
    in_scope = f"(name.startsWith('gpc-') || name in {allowed})"
    policy: Manifest = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "gpucloud-service-namespaces"},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {"apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"],
                     "operations": ["CREATE", "UPDATE", "DELETE"]}
                ]
            },
            "matchConditions": [
                {"name": "a-gpucloud-service",
                 "expression": f"request.userInfo.username in {json.dumps(users)}"}
            ],
            "validations": [
                {
                    # A cluster-scoped request has no namespace key at all.
                    "expression": (
                        "has(request.namespace) && request.namespace != '' ? "
                        f"{in_scope.replace('name', 'request.namespace')} : "
                        "(request.kind.kind != 'Namespace' || has(request.name) && "
                        f"{in_scope.replace('name', 'request.name')})"
                    ),
                    "message": "gpucloud services write only in tenant namespaces (gpc-*) and their own",
                    "reason": "Forbidden",
                },
                {
                    "expression": (
                        f"request.userInfo.username != {json.dumps(pull_secret_writer)} || "
                        "request.kind.kind != 'Secret' || "
                        f"{IMAGE_PULL_RULE}"
                    ),
                    "message": "the instances service writes only image pull Secrets (gpc-registry-*)",
                    "reason": "Forbidden",
                },
            ],
        },
    }  # fmt: skip
    binding: Manifest = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": "gpucloud-service-namespaces"},
        "spec": {"policyName": "gpucloud-service-namespaces", "validationActions": ["Deny"]},
    }
    return [policy, binding]


def _path(manifest: Manifest) -> str:
    group_version = manifest["apiVersion"]
    plural = {
        "ClusterRole": "clusterroles",
        "ClusterRoleBinding": "clusterrolebindings",
        "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
        "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
    }[manifest["kind"]]
    return f"/apis/{group_version}/{plural}/{manifest['metadata']['name']}"


def apply(ca: Path, admin_token: str) -> int:
    """Server-side apply every object as the cluster admin; returns how many."""
    objects = manifests()
    for manifest in objects:
        server_side_apply(ca, admin_token, _path(manifest), json.dumps(manifest))
    return len(objects)


def server_side_apply(ca: Path, admin_token: str, path: str, body: str) -> None:
    """Apply one object (JSON or YAML text) at its API `path` as the cluster admin: made
    if missing, brought in line if not."""
    request = urllib.request.Request(
        f"https://{HOST}:{PORTS.kube_apiserver}{path}?fieldManager=gpucloud-stack&force=true",
        data=body.encode(),
        method="PATCH",
        headers={
            "Authorization": f"Bearer {admin_token}",
            "Content-Type": "application/apply-patch+yaml",
        },
    )
    with urllib.request.urlopen(
        request, context=ssl.create_default_context(cafile=str(ca)), timeout=30
    ):
        pass


def write_kubeconfig(path: Path, user_name: str, token: str, ca: Path) -> None:
    """A kubeconfig (0600) for the local cluster, signed in as `user_name`."""
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_text(
        f"""apiVersion: v1
kind: Config
clusters:
- name: gpucloud-local
  cluster:
    server: https://{HOST}:{PORTS.kube_apiserver}
    certificate-authority: {ca}
users:
- name: {user_name}
  user:
    token: {token}
contexts:
- name: gpucloud-local
  context: {{cluster: gpucloud-local, user: {user_name}}}
current-context: gpucloud-local
"""
    )


def kubeconfig(service: str, token: str, ca: Path) -> Path:
    """The kubeconfig of `service` alone, signed in as its own user."""
    path = layout.etc_dir() / f"kubeconfig-{service}"
    write_kubeconfig(path, user(service), token, ca)
    return path
