"""The Helm chart, rendered by Helm itself (built by the stack's provisioning): what
it grants each service, and the network and ingress limits it sets.

No cluster runs the chart here, so what it would enforce is read from its
objects: who may connect into the platform's namespace, which service gets
which secret, which writes the admission policy lets through.
"""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from gpucloud_agent.seals import TOKEN_PATH

from .chart_support import CHART, REQUIRED, helm, render_chart

RELEASE, NAMESPACE = "gc", "gpucloud-system"
SERVICES = ("gateway", "instances", "storage", "metering", "monitoring")


def render(*values: str) -> list[dict[str, Any]]:
    return render_chart(RELEASE, NAMESPACE, *values)


@pytest.fixture(scope="module")
def rendered() -> list[dict[str, Any]]:
    return render("s3.rootSecret=minio-root")


def _one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    [found] = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def _env(docs: list[dict[str, Any]], workload: str) -> dict[str, Any]:
    kind = "DaemonSet" if workload == "agent" else "Deployment"
    [container] = _one(docs, kind, f"{RELEASE}-{workload}")["spec"]["template"]["spec"][
        "containers"
    ]
    return {item["name"]: item.get("value", item.get("valueFrom")) for item in container["env"]}


def _admits(policy: dict[str, Any], namespace: str | None, pod_labels: dict[str, str]) -> bool:
    """Whether an ingress rule of `policy` admits a source (namespace None: outside the
    cluster), with the NetworkPolicy semantics of matchLabels selectors."""
    own = policy["metadata"].get("namespace", NAMESPACE)
    for rule in policy["spec"].get("ingress", []):
        for peer in rule.get("from", []):
            if namespace is None:
                continue
            if "namespaceSelector" in peer:
                wanted = peer["namespaceSelector"].get("matchLabels", {})
                if wanted.get("kubernetes.io/metadata.name", namespace) != namespace:
                    continue
            elif namespace != own:
                continue
            wanted_pods = peer.get("podSelector", {}).get("matchLabels", {})
            if all(pod_labels.get(k) == v for k, v in wanted_pods.items()):
                return True
    return False


def test_only_the_ingress_and_the_platform_reach_the_platform(
    rendered: list[dict[str, Any]],
) -> None:
    policy = _one(rendered, "NetworkPolicy", f"{RELEASE}-platform")
    assert policy["spec"]["podSelector"] == {}  # every pod of the namespace
    sources = [
        ("the ingress controller", "ingress-nginx", {"app": "ingress-nginx"}, True),
        ("another platform pod", NAMESPACE, {"app.kubernetes.io/name": "instances"}, True),
        ("a tenant's pod", "gpc-acme", {"gpucloud.io/instance": "nb"}, False),
        ("a pod of kube-system", "kube-system", {}, False),
        ("outside the cluster", None, {}, False),
    ]
    for why, namespace, labels, admitted in sources:
        assert _admits(policy, namespace, labels) is admitted, why


#: A pod connecting: its namespace (None: outside the cluster) and its labels.
Source = tuple[str | None, dict[str, str]]


def test_what_the_platform_brings_along_admits_the_platform_and_tenants_only_to_s3(
    rendered: list[dict[str, Any]],
) -> None:
    """Review M9: Kafka's and the database's namespaces admit the platform's pods and
    their own; the object store's admits tenants' pods (and users' presigned URLs,
    through the ingress) on its S3 port alone."""
    platform_pod: Source = (NAMESPACE, {"app.kubernetes.io/name": "storage"})
    tenant_pod: Source = ("gpc-acme", {"gpucloud.io/instance": "nb"})
    outsiders: list[Source] = [tenant_pod, ("ingress-nginx", {}), ("kube-system", {}), (None, {})]
    for name, namespace in (("kafka", "kafka"), ("mongodb", "mongodb")):
        policy = _one(rendered, "NetworkPolicy", f"{RELEASE}-{name}-ingress")
        assert policy["metadata"]["namespace"] == namespace
        assert _admits(policy, *platform_pod), name
        assert _admits(policy, namespace, {}), name  # its own pods (replication)
        for source in outsiders:
            assert not _admits(policy, *source), (name, source)
    store = _one(rendered, "NetworkPolicy", f"{RELEASE}-object-store-ingress")
    everyone, tenants = store["spec"]["ingress"]
    assert "ports" not in everyone  # the platform's pods, every port
    assert tenants["ports"] == [{"protocol": "TCP", "port": 9000}]
    managed = [peer["namespaceSelector"]["matchLabels"] for peer in tenants["from"]]
    assert managed == [{"gpucloud.io/managed": "true"},
                       {"kubernetes.io/metadata.name": "ingress-nginx"}]  # fmt: skip


def test_each_service_gets_only_its_own_secrets(rendered: list[dict[str, Any]]) -> None:
    envs = {name: _env(rendered, name) for name in (*SERVICES, "agent")}
    for name, env in envs.items():
        assert env["GPUCLOUD_KAFKA_USERNAME"] == f"gpucloud-{name}", name
        key = env["GPUCLOUD_KAFKA_PASSWORD"]["secretKeyRef"]["key"]
        assert key == f"kafka-password-{name}", name
        signs = name in {"gateway", "instances"}
        assert ("GPUCLOUD_IDENTITY_PRIVATE_KEY" in env) is signs, name
        assert ("GPUCLOUD_S3_SECRET_KEY" in env) is (name == "storage"), name
        assert ("GPUCLOUD_SESSION_SECRET" in env) is (name == "gateway"), name
        assert ("GPUCLOUD_WEBHOOK_SECRETS_KEY" in env) is (name == "monitoring"), name
        assert "GPUCLOUD_IDENTITY_SIGNING_KEY" not in env, name
    instances = envs["instances"]
    assert (
        instances["GPUCLOUD_TENANT_STORAGE_SUBJECT"]
        == f"ServiceAccount:{NAMESPACE}:{RELEASE}-storage"
    )


def test_instance_lists_come_from_memory_only_with_one_instances_replica(
    rendered: list[dict[str, Any]],
) -> None:
    assert _env(rendered, "instances")["GPUCLOUD_LISTS_FROM_MEMORY"] == "false"  # 2 by default
    single = render("s3.rootSecret=minio-root", "services.instances.replicas=1")
    assert _env(single, "instances")["GPUCLOUD_LISTS_FROM_MEMORY"] == "true"


def test_the_storage_service_can_run_on_a_rook_object_store() -> None:
    docs = render(
        "s3.objectStore=rgw",
        "s3.endpoint=http://rook-ceph-rgw-gpucloud.rook-ceph.svc",
        "s3.credentialsSecret=rook-ceph-object-user-gpucloud-gpucloud-storage",
        "volumes.defaultStorageClass=ceph-block",
    )
    env = _env(docs, "storage")
    assert env["GPUCLOUD_OBJECT_STORE"] == "rgw"
    assert env["GPUCLOUD_S3_ENDPOINT"] == "http://rook-ceph-rgw-gpucloud.rook-ceph.svc"
    assert env["GPUCLOUD_DEFAULT_STORAGE_CLASS"] == "ceph-block"
    for setting, key in (
        ("GPUCLOUD_S3_ACCESS_KEY", "AccessKey"),
        ("GPUCLOUD_S3_SECRET_KEY", "SecretKey"),
    ):
        ref = env[setting]["secretKeyRef"]
        assert ref == {"name": "rook-ceph-object-user-gpucloud-gpucloud-storage", "key": key}
    # No MinIO root, so no MinIO access job.
    assert not [d for d in docs if d["metadata"]["name"].endswith("-minio-access")]


def test_storage_has_no_cluster_wide_rights(rendered: list[dict[str, Any]]) -> None:
    bound = {
        subject["name"]
        for doc in rendered
        if doc["kind"] == "ClusterRoleBinding"
        for subject in doc["subjects"]
    }
    assert f"{RELEASE}-storage" not in bound
    instances = _one(rendered, "ClusterRole", f"{RELEASE}-instances")
    binds = [rule for rule in instances["rules"] if "bind" in rule["verbs"]]
    assert binds == [
        {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
         "verbs": ["bind"],
         "resourceNames": [f"{RELEASE}-tenant-storage", f"{RELEASE}-tenant-kubectl"]}
    ]  # fmt: skip
    # A user's kubectl reads, logs, execs and forwards ports: it makes no pod and reads
    # no Secret.
    kubectl = _one(rendered, "ClusterRole", f"{RELEASE}-tenant-kubectl")["rules"]
    granted = {(resource, verb) for rule in kubectl for resource in rule["resources"]
               for verb in rule["verbs"]}  # fmt: skip
    assert ("pods", "list") in granted
    assert ("pods/exec", "create") in granted
    assert not {("pods", "create"), ("secrets", "get"), ("secrets", "list")} & granted
    secrets = _one(rendered, "ClusterRole", f"{RELEASE}-tenant-storage")["rules"]
    assert secrets[0]["resources"] == ["persistentvolumeclaims"]
    # Secrets are written, never read: pull Secrets share the namespace (review M3).
    # No patch: a patch answers the whole Secret (review N5).
    assert secrets[1] == {"apiGroups": [""], "resources": ["secrets"],
                          "verbs": ["create", "update", "delete"]}  # fmt: skip


def test_the_admission_policy_covers_the_service_accounts(rendered: list[dict[str, Any]]) -> None:
    policy = _one(rendered, "ValidatingAdmissionPolicy", f"{RELEASE}-service-namespaces")
    [condition] = policy["spec"]["matchConditions"]
    for name in ("instances", "storage"):
        assert f"system:serviceaccount:{NAMESPACE}:{RELEASE}-{name}" in condition["expression"]
    validations = policy["spec"]["validations"]
    namespaces, pull_secrets, storage_secrets, _bindings, accounts, _pod_security = validations
    assert "startsWith('gpc-')" in namespaces["expression"]
    # Never the release's own namespace: it holds the platform's Secrets.
    assert f"'{NAMESPACE}'" not in namespaces["expression"]
    assert f'"{NAMESPACE}"' not in namespaces["expression"]
    # The instances service's Secrets: image pull Secrets named gpc-registry-*, no other.
    instances = f"system:serviceaccount:{NAMESPACE}:{RELEASE}-instances"
    assert instances in pull_secrets["expression"]
    assert "startsWith('gpc-registry-')" in pull_secrets["expression"]
    assert "kubernetes.io/dockerconfigjson" in pull_secrets["expression"]
    # The storage service's: its credentials Secrets, Opaque, never a token Secret.
    storage = f"system:serviceaccount:{NAMESPACE}:{RELEASE}-storage"
    assert storage in storage_secrets["expression"]
    assert "startsWith('gpc-storage-')" in storage_secrets["expression"]
    assert "object.type == 'Opaque'" in storage_secrets["expression"]
    # Subresources too (a ServiceAccount's token), and the tokens it asks for are
    # users' kubectl accounts' alone.
    [rules] = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rules["resources"] == ["*/*"]
    assert "TokenRequest" in accounts["expression"]
    assert "startsWith('gpc-user-')" in accounts["expression"]
    binding = _one(rendered, "ValidatingAdmissionPolicyBinding", f"{RELEASE}-service-namespaces")
    assert binding["spec"]["validationActions"] == ["Deny"]


def test_the_api_ingress_caps_bodies_and_instances_stream(rendered: list[dict[str, Any]]) -> None:
    api = _one(rendered, "Ingress", f"{RELEASE}-api")["metadata"]["annotations"]
    instances = _one(rendered, "Ingress", f"{RELEASE}-instances")["metadata"]["annotations"]
    assert api["nginx.ingress.kubernetes.io/proxy-body-size"] == "1m"
    assert instances["nginx.ingress.kubernetes.io/proxy-body-size"] == "0"
    [rule] = _one(rendered, "Ingress", f"{RELEASE}-instances")["spec"]["rules"]
    assert rule["host"] == "*.gpucloud-instances.example"  # a registrable domain of its own


def test_the_chart_refuses_to_render_without_identity_keys() -> None:
    done = subprocess.run(
        [str(helm()), "template", RELEASE, str(CHART)], capture_output=True, text=True, check=False
    )
    assert done.returncode != 0
    assert "identity.publicKeys.gateway" in done.stderr


def test_the_agent_runs_as_no_one_with_no_capabilities() -> None:
    """It runs on every tenant GPU node with hostPID (review M4): whatever reaches it
    gets no root and no capability. NVML works so, as measured on an H100."""
    [daemon_set] = [d for d in render_chart("gc", "gpucloud") if d["kind"] == "DaemonSet"]
    [container] = daemon_set["spec"]["template"]["spec"]["containers"]
    context = container["securityContext"]
    assert context["runAsNonRoot"] is True
    assert context["runAsUser"] != 0
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert context["allowPrivilegeEscalation"] is False


def test_the_agent_asks_monitorings_service_for_its_node_key_with_a_pod_bound_token() -> None:
    """Each node's key (review M4) comes from the monitoring Service, on the port it
    serves, for a token projected for monitoring's audience alone."""
    documents = render_chart("gc", "gpucloud")
    [daemon_set] = [d for d in documents if d["kind"] == "DaemonSet"]
    pod = daemon_set["spec"]["template"]["spec"]
    [container] = pod["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    [service] = [
        d for d in documents if d["kind"] == "Service" and d["metadata"]["name"] == "gc-monitoring"
    ]
    [port] = service["spec"]["ports"]
    assert env["GPUCLOUD_MONITORING_URL"] == f"http://gc-monitoring:{port['port']}"
    [volume] = [v for v in pod["volumes"] if v["name"] == "monitoring-token"]
    [source] = volume["projected"]["sources"]
    assert source["serviceAccountToken"]["audience"] == "gpucloud-monitoring"
    [mount] = [m for m in container["volumeMounts"] if m["name"] == "monitoring-token"]
    assert mount["mountPath"] + "/token" == TOKEN_PATH


def test_the_chart_will_not_render_without_tls() -> None:
    """API keys, passwords and session cookies cross the ingress (review L4): without a
    certificate, and no load balancer said to end TLS in front, nothing is rendered."""
    refused = subprocess.run(
        [str(helm()), "template", "gc", str(CHART), "--set", "ingress.tlsSecret=",
         *(arg for value in REQUIRED if not value.startswith("ingress.tlsSecret")
           for arg in ("--set", value))],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert refused.returncode != 0
    assert "ingress.tlsSecret is empty" in refused.stderr
    upstream = render_chart(
        "gc", "gpucloud", "ingress.tlsSecret=", "ingress.tlsTerminatedUpstream=true"
    )
    assert [d for d in upstream if d["kind"] == "Ingress"]
