"""The Helm chart installed for real: `helm install` on the local API server, into its
own namespace, with the local images' names. kwok runs the chart's pods as it runs
every pod here (no container starts), so what is checked is what the API server and
the scheduler decide: every object accepted, admission policies included; each
Deployment's and the agent's pods scheduled where the values say; each service
account's rights, by impersonation, against the table in docs/security.md; then an
upgrade, and an uninstall that leaves nothing behind."""

from __future__ import annotations

import base64
import contextlib
import random
import re
import subprocess
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import yaml
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config

from gpucloud_stack import fleet as stack_fleet
from gpucloud_stack import layout

from .chart_support import CHART, REQUIRED, helm, render_chart
from .support import eventually, unique

#: A namespace of its own each run: a deleted one takes a while to go.
RELEASE, NAMESPACE = "gci", unique("gpucloud-chart")
RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted"}


async def test_the_chart_installs_upgrades_and_uninstalls_on_the_local_api_server(
    kube: k8s.ApiClient, stack_env: dict[str, str]
) -> None:
    kubeconfig = stack_env["GPUCLOUD_KUBECONFIG"]
    core = k8s.CoreV1Api(kube)
    pool = unique("chart")
    cpu_node, gpu_node = unique("chart-cpu"), unique("chart-gpu")
    await core.create_node(_any(stack_fleet.cpu_node(cpu_node, {"gpucloud.io/test-pool": pool})))
    await core.create_node(
        stack_fleet.gpu_node(
            gpu_node, product="NVIDIA-H100-80GB-HBM3", gpus=1, zone="zone-a",
            labels={"gpucloud.io/test-pool": pool},
            pod_cidr=f"127.{random.randint(100, 240)}.{random.randint(0, 250)}.0/24",
        )  # type: ignore[arg-type]
    )  # fmt: skip
    # Where the chart's policies for Kafka, the database and the object store go (the
    # operator's own namespaces: they must exist).
    for backing in ("kafka", "mongodb", "minio"):
        with contextlib.suppress(k8s.ApiException):  # made by an earlier run
            await core.create_namespace(_any({"metadata": {"name": backing}}))
    runtime_class = unique("nvidia")
    await k8s.NodeV1Api(kube).create_runtime_class(
        {"metadata": {"name": runtime_class}, "handler": "nvidia"}  # type: ignore[arg-type]
    )
    values = [
        *REQUIRED, "s3.rootSecret=minio-root",
        # The names compose gives the images it builds (docker-compose.yml).
        "image.repository=gpucloud", "image.tag=local", "image.pullPolicy=Never",
        f"platform.nodeSelector.gpucloud\\.io/test-pool={pool}",
        f"agent.nodeSelector.gpucloud\\.io/test-pool={pool}",
        f"agent.runtimeClassName={runtime_class}",
    ]  # fmt: skip
    try:
        # Hooks (the Kafka and MinIO access Jobs) would wait for a container to finish;
        # kwok starts none, so they are checked by a dry run below instead.
        _helm(kubeconfig, "install", RELEASE, str(CHART), "--namespace", NAMESPACE,
              "--create-namespace", "--no-hooks", "--wait", "--timeout", "120s", *_set(values))  # fmt: skip
        objects = _manifest(kubeconfig)
        assert len(objects) >= 25, [o["kind"] for o in objects]
        for obj in objects:
            assert await _exists(kube, obj), (obj["kind"], obj["metadata"]["name"])
        await _scheduled_where_the_values_say(kube, cpu_node, gpu_node)
        for job in (doc for doc in render_chart(RELEASE, NAMESPACE, "s3.rootSecret=minio-root")
                    if doc["kind"] == "Job"):  # fmt: skip
            await k8s.BatchV1Api(kube).create_namespaced_job(NAMESPACE, _any(job), dry_run=DRY)
        await _rights_match_the_security_table(kube, stack_env, cpu_node)

        _helm(kubeconfig, "upgrade", RELEASE, str(CHART), "--namespace", NAMESPACE,
              "--no-hooks", "--wait", "--timeout", "120s", "--reuse-values",
              "--set", "services.metering.replicas=1")  # fmt: skip
        metering = await k8s.AppsV1Api(kube).read_namespaced_deployment(
            f"{RELEASE}-metering", NAMESPACE
        )
        assert metering.spec.replicas == 1
        assert _helm(kubeconfig, "status", RELEASE, "--namespace", NAMESPACE).count("REVISION: 2")

        _helm(kubeconfig, "uninstall", RELEASE, "--namespace", NAMESPACE, "--wait")

        async def gone() -> bool:
            return not [obj for obj in objects if await _exists(kube, obj)]

        await eventually(gone, timeout=60)
    finally:
        with contextlib.suppress(HelmFailed):
            _helm(kubeconfig, "uninstall", RELEASE, "--namespace", NAMESPACE, "--wait")
        for cleanup in (
            core.delete_namespace(NAMESPACE),
            core.delete_node(cpu_node),
            core.delete_node(gpu_node),
            k8s.NodeV1Api(kube).delete_runtime_class(runtime_class),
        ):
            with contextlib.suppress(k8s.ApiException):
                await cleanup


def _helm(kubeconfig: str, *args: str) -> str:
    done = subprocess.run(
        [str(helm()), "--kubeconfig", kubeconfig, *args], capture_output=True, text=True,
        timeout=240, check=False,
    )  # fmt: skip
    if done.returncode:
        raise HelmFailed(f"helm {' '.join(args[:2])}: {done.stderr.strip()}")
    return done.stdout


class HelmFailed(Exception):
    """A helm command's failure, with what helm said."""


def _set(values: list[str]) -> list[str]:
    return [arg for value in values for arg in ("--set", value)]


def _manifest(kubeconfig: str) -> list[dict[str, Any]]:
    text = _helm(kubeconfig, "get", "manifest", RELEASE, "--namespace", NAMESPACE)
    return [doc for doc in yaml.safe_load_all(text) if doc]


async def _exists(kube: k8s.ApiClient, obj: dict[str, Any]) -> bool:
    """Whether the API server holds `obj` (by its kind's path)."""
    api_version, kind, name = obj["apiVersion"], obj["kind"], obj["metadata"]["name"]
    group_path = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    namespace = obj["metadata"].get("namespace") or (NAMESPACE if kind in _NAMESPACED else None)
    scope = f"/namespaces/{namespace}" if namespace else ""
    plural = _PLURALS.get(kind, kind.lower() + "s")
    try:
        await kube.call_api(
            f"{group_path}{scope}/{plural}/{name}", "GET", auth_settings=["BearerToken"],
            response_types_map={200: "object"},
        )  # fmt: skip
    except k8s.ApiException as error:
        if error.status == 404:
            return False
        raise
    return True


_NAMESPACED = {"NetworkPolicy", "ServiceAccount", "Secret", "Service", "DaemonSet",
               "Deployment", "Ingress", "Job"}  # fmt: skip
_PLURALS = {
    "NetworkPolicy": "networkpolicies",
    "Ingress": "ingresses",
    "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
}


async def _scheduled_where_the_values_say(
    kube: k8s.ApiClient, cpu_node: str, gpu_node: str
) -> None:
    apps = k8s.AppsV1Api(kube)
    for deployment in (await apps.list_namespaced_deployment(NAMESPACE)).items:
        assert deployment.status.ready_replicas == deployment.spec.replicas, (
            deployment.metadata.name
        )
    pods = (await k8s.CoreV1Api(kube).list_namespaced_pod(NAMESPACE)).items
    by_node: dict[str, set[str]] = {}
    for pod in pods:
        by_node.setdefault(pod.spec.node_name, set()).add(
            pod.metadata.labels["app.kubernetes.io/name"]
        )
    # The services on the platform's CPU node, the agent on the GPU node only.
    assert by_node == {
        cpu_node: {"gateway", "instances", "storage", "metering", "monitoring"},
        gpu_node: {"agent"},
    }, by_node


# --- rights, by impersonation ---------------------------------------------------------


@dataclass
class Places:
    tenant: str
    other_tenant: str
    release: str = NAMESPACE
    stocks: str = "gpucloud-stocks"

    def get(self, place: str | None) -> str | None:
        return None if place is None else getattr(self, place.replace(" ", "_"))


async def _rights_match_the_security_table(
    kube: k8s.ApiClient, stack_env: dict[str, str], node: str
) -> None:
    core = k8s.CoreV1Api(kube)
    places = Places(tenant=unique("gpc-chart"), other_tenant=unique("gpc-chart"))
    for namespace in (places.tenant, places.other_tenant):
        await core.create_namespace(_any({"metadata": {"name": namespace, "labels": RESTRICTED}}))
    clients: list[k8s.ApiClient] = []
    try:

        async def as_account(name: str) -> k8s.ApiClient:
            configuration = k8s.Configuration()
            await k8s_config.load_kube_config(
                config_file=stack_env["GPUCLOUD_KUBECONFIG"], client_configuration=configuration
            )
            client = k8s.ApiClient(configuration)
            client.set_default_header(
                "Impersonate-User", f"system:serviceaccount:{NAMESPACE}:{RELEASE}-{name}"
            )
            clients.append(client)
            return client

        # What the instances service does for each tenant: the storage role, for storage.
        instances = await as_account("instances")
        binding = _storage_binding(f"{RELEASE}-storage")
        await k8s.RbacAuthorizationV1Api(instances).create_namespaced_role_binding(
            places.tenant, binding
        )

        # The API server loads a new admission policy from its own watch, a moment after
        # the install returns; until then only RBAC answers. Wait for it to take effect.
        async def policy_in_effect() -> bool:
            return await _attempt(instances, "create pods in release", places, node) == 403

        await eventually(policy_in_effect, timeout=30, interval=0.5)
        table = _security_table()
        assert set(table) == {"instances", "storage", "monitoring", "agent", "gateway", "metering"}
        for account, (may, may_not) in table.items():
            client = await as_account(account)
            for phrase in may:
                status = await _attempt(client, phrase, places, node)
                assert status != 403, (account, "may", phrase, status)
            for phrase in may_not:
                status = await _attempt(client, phrase, places, node)
                assert status == 403, (account, "may not", phrase, status)
    finally:
        for client in clients:
            await client.close()
        for namespace in (places.tenant, places.other_tenant):
            with contextlib.suppress(k8s.ApiException):
                await core.delete_namespace(namespace)


def _security_table() -> dict[str, tuple[list[str], list[str]]]:
    """docs/security.md's table of the chart's service accounts: (may, may not)."""
    text = (layout.REPO_ROOT / "docs" / "security.md").read_text()
    section = text.split("## What each of the chart's service accounts may do", 1)[1]
    table: dict[str, tuple[list[str], list[str]]] = {}
    for line in section.split("\n## ", 1)[0].splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 3 or cells[0] in {"service account", "---"}:
            continue
        table[cells[0]] = tuple(  # type: ignore[assignment]
            [phrase.strip() for phrase in cell.split(";") if phrase.strip()] for cell in cells[1:]
        )
    return table


_PHRASE = re.compile(r"^(?P<verb>\S+) (?P<thing>\S+)(?: in (?P<place>.+))?$")


async def _attempt(client: k8s.ApiClient, phrase: str, places: Places, node: str) -> int:
    """The HTTP status of doing `phrase` (a write as a dry run): 403 when refused."""
    match = _PHRASE.match(phrase)
    assert match, phrase
    action = _ACTIONS.get((match["verb"], match["thing"]))
    assert action is not None, f"no way to try {phrase!r}: add it to _ACTIONS"
    try:
        await action(client, places.get(match["place"]), node)
    except k8s.ApiException as error:
        return int(error.status)
    return 200


Action = Callable[[k8s.ApiClient, Any, str], Awaitable[Any]]
DRY = "All"  # writes are authorised and admitted, never stored


def _pod() -> Any:
    return {
        "metadata": {"name": unique("probe")},
        "spec": {
            "securityContext": {"runAsNonRoot": True, "runAsUser": 1000,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "c", "image": "busybox", "securityContext": {
                "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}],
        },
    }  # fmt: skip


def _token_secret(name: str) -> Any:
    return {
        "metadata": {"name": name,
                     "annotations": {"kubernetes.io/service-account.name": "gpc-user-u-1"}},
        "type": "kubernetes.io/service-account-token",
    }  # fmt: skip


def _secret(name: str, kind: str) -> Any:
    data = {".dockerconfigjson": base64.b64encode(b'{"auths": {}}').decode()}
    return {"metadata": {"name": name}, "type": kind,
            **({"data": data} if kind == "kubernetes.io/dockerconfigjson" else {})}  # fmt: skip


def _storage_binding(subject: str) -> Any:
    return {
        "metadata": {"name": unique("storage")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": f"{RELEASE}-tenant-storage"},
        "subjects": [{"kind": "ServiceAccount", "name": subject, "namespace": NAMESPACE}],
    }  # fmt: skip


def _any(body: dict[str, Any]) -> Any:
    """A plain object as the typed API takes it (it sends dicts as they are)."""
    return body


def _core(client: k8s.ApiClient) -> k8s.CoreV1Api:
    return k8s.CoreV1Api(client)


def _rbac(client: k8s.ApiClient) -> k8s.RbacAuthorizationV1Api:
    return k8s.RbacAuthorizationV1Api(client)


_ACTIONS: dict[tuple[str, str], Action] = {
    ("create", "pods"): lambda c, ns, _: _core(c).create_namespaced_pod(ns, _pod(), dry_run=DRY),
    ("list", "pods"): lambda c, ns, _: (
        _core(c).list_namespaced_pod(ns) if ns else _core(c).list_pod_for_all_namespaces()
    ),
    ("get", "pods/log"): lambda c, ns, _: _core(c).read_namespaced_pod_log("none", ns),
    ("get", "secrets"): lambda c, ns, _: _core(c).read_namespaced_secret("none", ns),
    ("list", "secrets"): lambda c, ns, _: (
        _core(c).list_namespaced_secret(ns) if ns else _core(c).list_secret_for_all_namespaces()
    ),
    # A patch, even a dry run, answers the whole Secret: reading by another verb (N5).
    ("patch", "secrets"): lambda c, ns, _: _core(c).patch_namespaced_secret(
        "none", ns, {"metadata": {"labels": {"gpucloud.io/probe": "1"}}}, dry_run=DRY
    ),
    # A token Secret the token controller would fill for the named account (N5).
    ("create", "token-secrets"): lambda c, ns, _: _core(c).create_namespaced_secret(
        ns, _token_secret(unique("gpc-storage")), dry_run=DRY
    ),
    ("create", "pull-secrets"): lambda c, ns, _: _core(c).create_namespaced_secret(
        ns, _secret(unique("gpc-registry"), "kubernetes.io/dockerconfigjson"), dry_run=DRY
    ),
    ("create", "storage-secrets"): lambda c, ns, _: _core(c).create_namespaced_secret(
        ns, _secret(unique("gpc-storage"), "Opaque"), dry_run=DRY
    ),
    ("create", "opaque-secrets"): lambda c, ns, _: _core(c).create_namespaced_secret(
        ns, _secret(unique("gpc-registry"), "Opaque"), dry_run=DRY
    ),
    ("create", "storage-bindings"): lambda c, ns, _: _rbac(c).create_namespaced_role_binding(
        ns, _storage_binding(f"{RELEASE}-storage"), dry_run=DRY
    ),
    ("create", "self-bindings"): lambda c, ns, _: _rbac(c).create_namespaced_role_binding(
        ns, _storage_binding(f"{RELEASE}-instances"), dry_run=DRY
    ),
    ("create", "clusterrolebindings"): lambda c, _, __: _rbac(c).create_cluster_role_binding(
        _any(
            {
                "metadata": {"name": unique("admin")},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "cluster-admin",
                },
                "subjects": [
                    {
                        "kind": "ServiceAccount",
                        "name": f"{RELEASE}-instances",
                        "namespace": NAMESPACE,
                    }
                ],
            }
        ),
        dry_run=DRY,
    ),
    ("create", "namespaces"): lambda c, _, __: _core(c).create_namespace(
        _any({"metadata": {"name": unique("gpc-chart"), "labels": RESTRICTED}}), dry_run=DRY
    ),
    ("lift", "pod-security"): lambda c, ns, _: _core(c).patch_namespace(
        ns,
        {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "privileged"}}},
        dry_run=DRY,
    ),
    ("create", "leases"): lambda c, ns, _: k8s.CoordinationV1Api(c).create_namespaced_lease(
        ns,
        _any({"metadata": {"name": unique("lease")}, "spec": {"holderIdentity": "probe"}}),
        dry_run=DRY,
    ),
    ("list", "nodes"): lambda c, _, __: _core(c).list_node(),
    ("patch", "nodes"): lambda c, _, node: _core(c).patch_node(
        node, {"metadata": {"labels": {"gpucloud.io/probe": "1"}}}, dry_run=DRY
    ),
    ("create", "persistentvolumeclaims"): lambda c, ns, _: _core(
        c
    ).create_namespaced_persistent_volume_claim(
        ns,
        _any(
            {
                "metadata": {"name": unique("claim")},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "1Gi"}},
                },
            }
        ),
        dry_run=DRY,
    ),
    ("create", "jobsets"): lambda c, ns, _: k8s.CustomObjectsApi(c).create_namespaced_custom_object(
        "jobset.x-k8s.io",
        "v1alpha2",
        ns,
        "jobsets",
        {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": unique("probe")},
            "spec": {
                "replicatedJobs": [
                    {
                        "name": "w",
                        "replicas": 1,
                        "template": {
                            "spec": {
                                "template": {"spec": {"restartPolicy": "Never", **_pod()["spec"]}}
                            }
                        },
                    }
                ]
            },
        },
        dry_run=DRY,
    ),
}
