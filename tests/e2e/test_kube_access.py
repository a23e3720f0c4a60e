"""Kubernetes below the API: each service acts as its own user, with only the rights
its work needs (docs/security.md)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config

from gpucloud_libs.naming import TENANT_KUBECTL_ROLE, TENANT_STORAGE_ROLE, tenant_namespace

from .chart_support import render_chart
from .conftest import stack_service_env
from .platform import Platform
from .support import eventually, unique


@pytest.fixture
async def as_service() -> AsyncIterator[Callable[[str], Any]]:
    clients: list[k8s.ApiClient] = []

    async def connect(service: str) -> k8s.ApiClient:
        configuration = k8s.Configuration()
        await k8s_config.load_kube_config(
            config_file=stack_service_env(service)["GPUCLOUD_KUBECONFIG"],
            client_configuration=configuration,
        )
        clients.append(k8s.ApiClient(configuration))
        return clients[-1]

    yield connect
    for api in clients:
        await api.close()


#: The namespace the chart installs the platform into, with its Secrets.
PLATFORM_NAMESPACE = "gpucloud-system"


@pytest.fixture
async def platform_namespace(kube: k8s.ApiClient) -> str:
    """The platform's namespace, there as on an installed cluster: a write into a
    namespace that does not exist is refused with 404 before any policy is asked, which
    would prove nothing."""
    core = k8s.CoreV1Api(kube)
    if await _status(core.read_namespace(PLATFORM_NAMESPACE)) == 404:
        body: Any = {"metadata": {"name": PLATFORM_NAMESPACE}}
        created = await _status(core.create_namespace(body))
        assert created in (200, 409), created  # 409: another test made it meanwhile
    return PLATFORM_NAMESPACE


async def _status(call: Any) -> int:
    try:
        await call
    except k8s.ApiException as error:
        return int(error.status)
    return 200


async def _tenant_namespace(platform: Platform, kube: k8s.ApiClient) -> str:
    """A fresh tenant's namespace, once the storage service's binding is in it."""
    account = await platform.tenant()
    namespace = tenant_namespace(account.tenant_id)
    rbac = k8s.RbacAuthorizationV1Api(kube)

    async def bound() -> bool:
        return (
            await _status(rbac.read_namespaced_role_binding(TENANT_STORAGE_ROLE, namespace)) == 200
        )

    await eventually(bound, timeout=30)
    return namespace


async def test_storage_writes_secrets_in_tenant_namespaces_and_reads_none(
    platform: Platform, kube: k8s.ApiClient, as_service: Callable[[str], Any]
) -> None:
    """It writes its instances' credentials there; it reads no Secret, so not the image
    pull Secrets beside them (review M3)."""
    namespace = await _tenant_namespace(platform, kube)
    core = k8s.CoreV1Api(await as_service("storage"))
    secret: Any = {"metadata": {"name": unique("gpc-storage-probe")}, "stringData": {"k": "v"}}
    assert await _status(core.create_namespaced_secret(namespace, secret, dry_run="All")) == 200
    assert await _status(core.list_namespaced_secret(namespace)) == 403
    assert await _status(core.read_namespaced_secret("absent", namespace)) == 403
    for elsewhere in ("default", "kube-system", PLATFORM_NAMESPACE):
        assert await _status(core.list_namespaced_secret(elsewhere)) == 403, elsewhere
    assert await _status(core.list_secret_for_all_namespaces()) == 403
    # Nor by another verb (review N5): a patch, even a dry run, answers the whole
    # Secret; a token Secret would be filled by the token controller for any account.
    probe: Any = {"metadata": {"labels": {"gpucloud.io/probe": "1"}}}
    assert (
        await _status(core.patch_namespaced_secret("any", namespace, probe, dry_run="All")) == 403
    )
    token: Any = {
        "metadata": {"name": unique("gpc-storage-token"),
                     "annotations": {"kubernetes.io/service-account.name": "default"}},
        "type": "kubernetes.io/service-account-token",
    }  # fmt: skip
    assert await _status(core.create_namespaced_secret(namespace, token, dry_run="All")) == 403
    named: Any = {"metadata": {"name": unique("gpc-registry-x")}, "stringData": {"k": "v"}}
    assert await _status(core.create_namespaced_secret(namespace, named, dry_run="All")) == 403
    # What it does write, it may write again whole (an update answers what it sent).
    made = await core.create_namespaced_secret(namespace, secret)
    made.string_data = {"k": "w"}
    replaced = await core.replace_namespaced_secret(made.metadata.name, namespace, made)
    assert replaced.metadata.name == made.metadata.name


async def test_instances_writes_in_tenant_namespaces_only(
    platform: Platform,
    kube: k8s.ApiClient,
    as_service: Callable[[str], Any],
    platform_namespace: str,
) -> None:
    namespace = await _tenant_namespace(platform, kube)
    api = await as_service("instances")
    core, rbac = k8s.CoreV1Api(api), k8s.RbacAuthorizationV1Api(api)
    pod: Any = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": unique("probe")},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }  # fmt: skip
    assert await _status(core.create_namespaced_pod("default", pod)) == 403
    namespace_body: Any = {"metadata": {"name": unique("evil")}}
    assert await _status(core.create_namespace(namespace_body)) == 403

    def binding(role: str, to: str = "gpucloud-storage") -> Any:
        return {
            "metadata": {"name": unique("grant")},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "User", "name": to, "apiGroup": "rbac.authorization.k8s.io"}],
        }  # fmt: skip

    def account_binding(role: str, account: str, of: str) -> Any:
        return {
            "metadata": {"name": unique("grant")},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": of}],
        }  # fmt: skip

    # It may grant the storage role to the storage service in a tenant namespace, and
    # the kubectl role to a user's account of that namespace: nothing more, to nobody
    # else, nowhere else.
    refused = {
        "another role": (namespace, binding("cluster-admin")),
        "the platform's namespace": (platform_namespace, binding(TENANT_STORAGE_ROLE)),
        "kube-system": ("kube-system", binding(TENANT_STORAGE_ROLE)),
        # The review's C1: the storage role (every Secret of the namespace) to itself.
        "itself": (namespace, binding(TENANT_STORAGE_ROLE, to="gpucloud-instances")),
        # The users' kubectl role goes to a user's account of the namespace alone.
        "kubectl to a user": (namespace, binding(TENANT_KUBECTL_ROLE, to="gpucloud-instances")),
        "kubectl to another namespace's account": (
            namespace,
            account_binding(TENANT_KUBECTL_ROLE, "gpc-user-u-1", "kube-system"),
        ),
        "kubectl to an account not a user's": (
            namespace,
            account_binding(TENANT_KUBECTL_ROLE, "default", namespace),
        ),
        "the storage role to a user's account": (
            namespace,
            account_binding(TENANT_STORAGE_ROLE, "gpc-user-u-1", namespace),
        ),
    }
    for what, (where, body) in refused.items():
        assert await _status(rbac.create_namespaced_role_binding(where, body)) == 403, what
    assert await _status(core.list_namespaced_secret(namespace)) == 403  # still none to read
    # Tokens: of a user's kubectl account in a tenant namespace, never of another
    # account (the storage service's, a controller's, the namespace's default).
    token: Any = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                  "spec": {"expirationSeconds": 600}}  # fmt: skip
    for where, account in (("kube-system", "default"), (platform_namespace, "default"),
                           (namespace, "default")):  # fmt: skip
        minted = core.create_namespaced_service_account_token(account, where, token)
        assert await _status(minted) == 403, (where, account)
    for account, expected in (("builder", 403), ("gpc-user-u-1", 200)):
        made: Any = {"metadata": {"name": account}}
        assert await _status(core.create_namespaced_service_account(namespace, made)) == expected
    mine = core.create_namespaced_service_account_token("gpc-user-u-1", namespace, token)
    assert await _status(mine) == 200
    for allowed in (
        binding(TENANT_STORAGE_ROLE),
        account_binding(TENANT_KUBECTL_ROLE, "gpc-user-u-1", namespace),
    ):
        assert await _status(rbac.create_namespaced_role_binding(namespace, allowed)) == 200
        await rbac.delete_namespaced_role_binding(allowed["metadata"]["name"], namespace)


async def test_instances_cannot_reach_the_platforms_namespace_or_loosen_pod_security(
    platform: Platform,
    kube: k8s.ApiClient,
    as_service: Callable[[str], Any],
    platform_namespace: str,
) -> None:
    """The platform's namespace holds its Secrets: the instances service writes nothing
    there, and it cannot lift the Pod Security of a namespace it keeps."""
    namespace = await _tenant_namespace(platform, kube)
    core = k8s.CoreV1Api(await as_service("instances"))
    pod: Any = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": unique("probe")},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }  # fmt: skip
    assert await _status(core.create_namespaced_pod(platform_namespace, pod)) == 403
    assert await _status(core.list_namespaced_secret(platform_namespace)) == 403
    for label, value in (
        ("pod-security.kubernetes.io/enforce", "privileged"),
        ("pod-security.kubernetes.io/enforce-version", "v1.20"),
    ):
        loosened = {"metadata": {"labels": {label: value}}}
        assert await _status(core.patch_namespace(namespace, loosened)) == 403, label
    kept = {"metadata": {"labels": {"gpucloud.io/probe": "1"}}}
    assert await _status(core.patch_namespace(namespace, kept)) == 200


async def test_instances_writes_image_pull_secrets_and_reads_no_secret(
    platform: Platform, kube: k8s.ApiClient, as_service: Callable[[str], Any]
) -> None:
    namespace = await _tenant_namespace(platform, kube)
    core = k8s.CoreV1Api(await as_service("instances"))

    def secret(name: str, kind: str) -> Any:
        return {
            "metadata": {"name": name}, "type": kind,
            "stringData": {".dockerconfigjson": '{"auths": {}}'},
        }  # fmt: skip

    pull = secret(unique("gpc-registry-ok"), "kubernetes.io/dockerconfigjson")
    assert await _status(core.create_namespaced_secret(namespace, pull)) == 200
    # Any other Secret, or an image pull Secret by another name: refused.
    opaque = secret(unique("gpc-registry-x"), "Opaque")
    assert await _status(core.create_namespaced_secret(namespace, opaque)) == 403
    other_name = secret(unique("creds"), "kubernetes.io/dockerconfigjson")
    assert await _status(core.create_namespaced_secret(namespace, other_name)) == 403
    # It reads none, not even its own: storage's credentials stay storage's.
    assert await _status(core.read_namespaced_secret(pull["metadata"]["name"], namespace)) == 403
    assert await _status(core.list_namespaced_secret(namespace)) == 403
    assert await _status(core.delete_namespaced_secret(pull["metadata"]["name"], namespace)) == 200


async def test_the_charts_admission_policy_stops_the_escalation_on_a_real_api_server(
    platform: Platform, kube: k8s.ApiClient, stack_env: dict[str, str], platform_namespace: str
) -> None:
    """The Helm chart's own policy, applied to this API server, judges requests made as
    the chart's instances ServiceAccount. The caller is also in system:masters, so RBAC
    allows everything and only the policy stands between it and the review's C1 steps."""
    namespace = await _tenant_namespace(platform, kube)
    release, chart_namespace = "gcc", platform_namespace
    docs = [
        doc
        for doc in render_chart(release, chart_namespace)
        if doc["kind"].startswith("ValidatingAdmissionPolicy")
    ]
    admission = k8s.AdmissionregistrationV1Api(kube)
    for doc in docs:
        body: Any = doc
        if doc["kind"] == "ValidatingAdmissionPolicy":
            await admission.create_validating_admission_policy(body)
        else:
            await admission.create_validating_admission_policy_binding(body)
    configuration = k8s.Configuration()
    await k8s_config.load_kube_config(
        config_file=stack_env["GPUCLOUD_KUBECONFIG"], client_configuration=configuration
    )
    impersonated = k8s.ApiClient(configuration)
    impersonated.set_default_header(
        "Impersonate-User", f"system:serviceaccount:{chart_namespace}:{release}-instances"
    )
    impersonated.set_default_header("Impersonate-Group", "system:masters")
    core, rbac = k8s.CoreV1Api(impersonated), k8s.RbacAuthorizationV1Api(impersonated)

    def binding(to: Any) -> Any:
        return {
            "metadata": {"name": unique("grant")},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": f"{release}-tenant-storage"},
            "subjects": [to],
        }  # fmt: skip

    itself = {
        "kind": "ServiceAccount",
        "name": f"{release}-instances",
        "namespace": chart_namespace,
    }
    storage = {"kind": "ServiceAccount", "name": f"{release}-storage", "namespace": chart_namespace}
    pod: Any = {"metadata": {"name": unique("probe")},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]}}  # fmt: skip
    try:

        async def enforced() -> bool:
            step = rbac.create_namespaced_role_binding(chart_namespace, binding(itself))
            return await _status(step) == 403

        # The policy is live once the API server has compiled it (about a second).
        await eventually(enforced, timeout=30, interval=0.5)
        steps = {
            "bind the storage role to itself in a tenant namespace":
                rbac.create_namespaced_role_binding(namespace, binding(itself)),
            "bind it in the release's namespace":
                rbac.create_namespaced_role_binding(chart_namespace, binding(storage)),
            "run a pod in the release's namespace":
                core.create_namespaced_pod(chart_namespace, pod),
            "lift a tenant namespace's Pod Security":
                core.patch_namespace(namespace, {"metadata": {"labels": {
                    "pod-security.kubernetes.io/enforce": "privileged"}}}),
        }  # fmt: skip
        for what, step in steps.items():
            assert await _status(step) == 403, what
        allowed = binding(storage)
        assert await _status(rbac.create_namespaced_role_binding(namespace, allowed)) == 200
        await k8s.RbacAuthorizationV1Api(kube).delete_namespaced_role_binding(
            allowed["metadata"]["name"], namespace
        )
    finally:
        await impersonated.close()
        for doc in docs:
            name = doc["metadata"]["name"]
            if doc["kind"] == "ValidatingAdmissionPolicy":
                await admission.delete_validating_admission_policy(name)
            else:
                await admission.delete_validating_admission_policy_binding(name)
