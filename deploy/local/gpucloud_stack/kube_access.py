"""Least privilege on the local cluster: each service is a Kubernetes user of its own.

The same roles as the Helm chart's `templates/rbac.yaml` and
`templates/admission.yaml`, for the users of the stack's token file:
- instances manages namespaces, workloads (pods and batch Jobs) and node cordons; it may write only in
  the tenant namespaces (`gpc-*`) and its own two (the admission policy below
  refuses the rest), and it binds the storage role in each tenant namespace;
- storage holds claims and Secrets in tenant namespaces alone, through those
  RoleBindings: it cannot read a Secret anywhere else;
- monitoring and the GPU simulator read nodes and pods; monitoring reviews the
  node agents' tokens (the agents' ServiceAccount lives in `gpucloud-agents`).
Applied with server-side apply at every `up`, so a change here reaches a running
cluster.
"""

from __future__ import annotations

import base64
import json
import ssl
import urllib.request
from pathlib import Path
from typing import Any

from . import layout
from .layout import LOCAL_1

Manifest = dict[str, Any]

#: The services that talk to the Kubernetes API, each as user `gpucloud-<service>`.
KUBE_SERVICES = ("instances", "storage", "monitoring", "agent")
#: The namespace the instances service keeps besides the tenants' (its settings): its
#: warm-stock pods and its lease, and no Secret. Never the platform's own namespace.
INSTANCES_NAMESPACES = ("gpucloud-stocks",)
#: The storage service's identity, the one subject the instances service may bind.
STORAGE_SUBJECT = "User:gpucloud-storage"
TENANT_STORAGE_ROLE = "gpucloud-tenant-storage"  # gpucloud_libs.naming
TENANT_KUBECTL_ROLE = "gpucloud-tenant-kubectl"  # gpucloud_libs.naming
USER_ACCOUNT_PREFIX = "gpc-user-"  # gpucloud_libs.naming
#: A tenant user's kubectl, in their namespace: read, logs, exec, port-forward; no
#: pod of their own (it would escape quota, placement and billing).
TENANT_KUBECTL_RULES: list[Manifest] = [
    {"apiGroups": [""], "resources": ["pods", "events"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["pods/exec", "pods/portforward"], "verbs": ["get", "create"]},
]

#: Where a node agent on a real node of this cluster would run, as this account: the
#: monitoring service hands a node's key to a token of it bound to a pod on that node.
#: The simulator stands in for the kwok nodes' agents; tests run an agent pod here.
AGENT_NAMESPACE = "gpucloud-agents"
AGENT_ACCOUNT = f"system:serviceaccount:{AGENT_NAMESPACE}:gpucloud-agent"

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
            # Nominates warm units' hold pods to their nodes (stocks/reconciler.py).
            {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]},
            {"apiGroups": ["scheduling.k8s.io"], "resources": ["priorityclasses"],
             "verbs": ["get", "list", "create"]},
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
             "verbs": ["get", "create", "update"]},
            {"apiGroups": [_RBAC], "resources": ["rolebindings"], "verbs": _ALL},
            # May grant the storage role and users' kubectl role (in the namespaces
            # and to the subjects the policy allows), nothing else.
            {"apiGroups": [_RBAC], "resources": ["clusterroles"], "verbs": ["bind"],
             "resourceNames": [TENANT_STORAGE_ROLE, TENANT_KUBECTL_ROLE]},
            # Users' own accounts in their namespaces, and their short-lived tokens.
            {"apiGroups": [""], "resources": ["serviceaccounts"],
             "verbs": ["get", "list", "create", "patch", "delete"]},
            {"apiGroups": [""], "resources": ["serviceaccounts/token"], "verbs": ["create"]},
            # A deleted project's namespace waits for its volumes' claims to go.
            {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["list"]},
        ],
    )  # fmt: skip
    # Secrets written, never read: a tenant namespace also holds image pull Secrets,
    # whose passwords are the instances service's to write alone (review M3).
    tenant_storage = _cluster_role(
        TENANT_STORAGE_ROLE,
        [
            {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": _ALL},
            # No patch: a patch, even a dry run, answers the whole Secret (review N5).
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create", "update", "delete"]},
        ],
    )  # fmt: skip
    readers = _cluster_role(
        "gpucloud-monitoring", [{"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": _READ}]
    )
    # Reviews the agents' tokens before it hands out node keys (node_keys.py).
    token_reviews = _cluster_role(
        "gpucloud-monitoring-token-reviews",
        [{"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"],
          "verbs": ["create"]}],
    )  # fmt: skip
    return [
        instances,
        _cluster_binding("gpucloud-instances", [user("instances")]),
        tenant_storage,
        _cluster_role(TENANT_KUBECTL_ROLE, TENANT_KUBECTL_RULES),
        readers,
        _cluster_binding("gpucloud-monitoring", [user("monitoring"), user("agent")]),
        token_reviews,
        _cluster_binding("gpucloud-monitoring-token-reviews", [user("monitoring")]),
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": AGENT_NAMESPACE}},
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "gpucloud-agent", "namespace": AGENT_NAMESPACE},
        },
        *admission_policy(
            [user("instances"), user("storage")],
            INSTANCES_NAMESPACES,
            instances_user=user("instances"),
            storage_user=user("storage"),
            storage_subject=STORAGE_SUBJECT,
        ),
    ]


#: What an image pull Secret written by the instances service must be (CEL).
IMAGE_PULL_RULE = (
    "(has(request.name) && request.name.startsWith('gpc-registry-') && "
    "(request.operation == 'DELETE' || object.type == 'kubernetes.io/dockerconfigjson'))"
)


#: What a Secret written by the storage service must be: its instances' credentials,
#: never a token Secret (which the token controller would fill for any account).
STORAGE_CREDENTIALS_RULE = (
    "(has(request.name) && request.name.startsWith('gpc-storage-') && "
    "(request.operation == 'DELETE' || object.type == 'Opaque'))"
)


def binding_rule(instances_user: str, storage_subject: str) -> str:
    """CEL: a RoleBinding the instances service writes grants the storage role, to the
    storage service alone, in a tenant namespace; or the users' kubectl role, to one
    user's ServiceAccount of that same namespace. Anything else would let it grant
    itself, or anyone, what the storage role holds: every tenant Secret."""
    kind, _, rest = storage_subject.partition(":")
    if kind == "ServiceAccount":
        namespace, _, name = rest.partition(":")
        subject = (
            f"s.kind == 'ServiceAccount' && s.name == {json.dumps(name)} && "
            f"has(s.namespace) && s.namespace == {json.dumps(namespace)}"
        )
    else:
        subject = f"s.kind == {json.dumps(kind)} && s.name == {json.dumps(rest)}"
    return (
        f"request.userInfo.username != {json.dumps(instances_user)} || "
        "request.kind.kind != 'RoleBinding' || request.operation == 'DELETE' || "
        "(request.namespace.startsWith('gpc-') && object.roleRef.kind == 'ClusterRole' && "
        "size(object.subjects) == 1 && "
        f"(object.roleRef.name == {json.dumps(TENANT_STORAGE_ROLE)} && "
        f"object.subjects.all(s, {subject}) || "
        f"object.roleRef.name == {json.dumps(TENANT_KUBECTL_ROLE)} && "
        "object.subjects.all(s, s.kind == 'ServiceAccount' && "
        f"s.name.startsWith({json.dumps(USER_ACCOUNT_PREFIX)}) && "
        "has(s.namespace) && s.namespace == request.namespace)))"
    )


def user_account_rule(instances_user: str) -> str:
    """CEL: the ServiceAccounts the instances service makes, and the tokens it asks for,
    are users' kubectl accounts (`gpc-user-*`): never a token of another account of
    the namespace, nor of any account elsewhere (the namespace rule keeps it to
    tenant namespaces)."""
    return (
        f"request.userInfo.username != {json.dumps(instances_user)} || "
        "!(request.kind.kind in ['ServiceAccount', 'TokenRequest']) || "
        "request.operation == 'DELETE' || "
        f"(has(request.name) && request.name.startsWith({json.dumps(USER_ACCOUNT_PREFIX)}))"
    )


def restricted_namespace_rule(instances_user: str) -> str:
    """CEL: a namespace the instances service makes or changes enforces Pod Security
    `restricted`, at the latest version: its labels cannot be loosened."""
    labels = "object.metadata.labels"
    enforce, version = (
        "pod-security.kubernetes.io/enforce",
        "pod-security.kubernetes.io/enforce-version",
    )
    return (
        f"request.userInfo.username != {json.dumps(instances_user)} || "
        "request.kind.kind != 'Namespace' || request.operation == 'DELETE' || "
        f"(has(object.metadata.labels) && '{enforce}' in {labels} && "
        f"{labels}['{enforce}'] == 'restricted' && "
        f"(!('{version}' in {labels}) || {labels}['{version}'] == 'latest'))"
    )


def admission_policy(
    users: list[str],
    own_namespaces: tuple[str, ...],
    *,
    instances_user: str,
    storage_user: str,
    storage_subject: str,
) -> list[Manifest]:
    """Writes by these users land in tenant namespaces (`gpc-*`) or the services' own,
    and a namespace they make or delete is one of those: RBAC cannot say "namespaces
    named so", an admission policy can. The instances service's Secrets are image pull
    Secrets named `gpc-registry-*`, its RoleBindings grant the storage role to the
    storage service alone, and its namespaces enforce Pod Security `restricted`."""
    pull_secret_writer = instances_user
    allowed = json.dumps(list(own_namespaces))
    in_scope = f"(name.startsWith('gpc-') || name in {allowed})"
    policy: Manifest = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "gpucloud-service-namespaces"},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                # `*` is every resource and no subresource; `*/*` is both: it brings in a
                # ServiceAccount's token requests, a pod's status and the like.
                "resourceRules": [
                    {"apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*/*"],
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
                {
                    "expression": (
                        f"request.userInfo.username != {json.dumps(storage_user)} || "
                        f"request.kind.kind != 'Secret' || {STORAGE_CREDENTIALS_RULE}"
                    ),
                    "message": "the storage service writes only its credentials Secrets (gpc-storage-*, Opaque)",
                    "reason": "Forbidden",
                },
                {
                    "expression": binding_rule(instances_user, storage_subject),
                    "message": "the instances service binds only the storage role, to the storage service, and the kubectl role, to a user's account of the namespace, in tenant namespaces",
                    "reason": "Forbidden",
                },
                {
                    "expression": user_account_rule(instances_user),
                    "message": "the instances service makes accounts and tokens for users' kubectl only (gpc-user-*)",
                    "reason": "Forbidden",
                },
                {
                    "expression": restricted_namespace_rule(instances_user),
                    "message": "a namespace of the instances service enforces Pod Security restricted",
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
    if manifest["kind"] == "Namespace":
        return f"/api/v1/namespaces/{manifest['metadata']['name']}"
    if manifest["kind"] == "ServiceAccount":
        meta = manifest["metadata"]
        return f"/api/v1/namespaces/{meta['namespace']}/serviceaccounts/{meta['name']}"
    plural = {
        "ClusterRole": "clusterroles",
        "ClusterRoleBinding": "clusterrolebindings",
        "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
        "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
    }[manifest["kind"]]
    return f"/apis/{group_version}/{plural}/{manifest['metadata']['name']}"


def apply(ca: Path, admin_token: str, server: str = LOCAL_1.server) -> int:
    """Server-side apply every object as the cluster admin of the API server at
    `server`; returns how many."""
    objects = manifests()
    for manifest in objects:
        server_side_apply(ca, admin_token, _path(manifest), json.dumps(manifest), server=server)
    return len(objects)


def server_side_apply(
    ca: Path, admin_token: str, path: str, body: str, *, server: str = LOCAL_1.server
) -> None:
    """Apply one object (JSON or YAML text) at its API `path` as the cluster admin: made
    if missing, brought in line if not."""
    request = urllib.request.Request(
        f"{server}{path}?fieldManager=gpucloud-stack&force=true",
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


def write_kubeconfig(
    path: Path, user_name: str, token: str, ca: Path, *, server: str = LOCAL_1.server
) -> None:
    """A kubeconfig (0600) for a local cluster, signed in as `user_name`; the CA's
    certificate is in it, so it stands alone (as one registered through the API)."""
    path.touch(mode=0o600)
    path.chmod(0o600)
    ca_data = base64.b64encode(ca.read_bytes()).decode()
    path.write_text(
        f"""apiVersion: v1
kind: Config
clusters:
- name: gpucloud-local
  cluster:
    server: {server}
    certificate-authority-data: {ca_data}
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
