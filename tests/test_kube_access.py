"""Kubernetes below the API: each service acts as its own user, with only the rights
its work needs (docs/security.md)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config

from gpucloud_libs.naming import TENANT_STORAGE_ROLE, tenant_namespace

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


async def test_storage_reads_secrets_in_tenant_namespaces_only(
    platform: Platform, kube: k8s.ApiClient, as_service: Callable[[str], Any]
) -> None:
    namespace = await _tenant_namespace(platform, kube)
    core = k8s.CoreV1Api(await as_service("storage"))
    assert await _status(core.list_namespaced_secret(namespace)) == 200
    assert await _status(core.read_namespaced_secret("absent", namespace)) == 404
    for elsewhere in ("default", "kube-system", "gpucloud-system"):
        assert await _status(core.list_namespaced_secret(elsewhere)) == 403, elsewhere
    assert await _status(core.list_secret_for_all_namespaces()) == 403


async def test_instances_writes_in_tenant_namespaces_only(
    platform: Platform, kube: k8s.ApiClient, as_service: Callable[[str], Any]
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

    def binding(role: str) -> Any:
        return {
            "metadata": {"name": unique("grant")},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "User", "name": "gpucloud-instances",
                          "apiGroup": "rbac.authorization.k8s.io"}],
        }  # fmt: skip

    # It may grant the storage role in a tenant namespace, and nothing more, nowhere else.
    assert (
        await _status(rbac.create_namespaced_role_binding(namespace, binding("cluster-admin")))
        == 403
    )
    assert (
        await _status(
            rbac.create_namespaced_role_binding("kube-system", binding(TENANT_STORAGE_ROLE))
        )
        == 403
    )
    allowed = binding(TENANT_STORAGE_ROLE)
    assert await _status(rbac.create_namespaced_role_binding(namespace, allowed)) == 200
    await rbac.delete_namespaced_role_binding(allowed["metadata"]["name"], namespace)


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
