"""What the clusters feature decides on its own (clusters/): which rights a
kubeconfig lacks (and that the Helm chart grants them all), what a look at a
cluster's nodes reports, how a cluster that stops answering is recorded, and how a
kubeconfig that cannot be used is refused."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucloud_instances.clusters.observation import (
    NEEDED_RIGHTS,
    excess_rights,
    missing_rights,
    summary,
    unreachable,
)
from gpucloud_instances.clusters.service import not_registered
from gpucloud_instances.wakeups import CLUSTERS, WorkItem
from gpucloud_libs.errors import Conflict, ValidationFailed
from gpucloud_libs.kubeconfigs import kubeconfig_server, parsed_kubeconfig

AT = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
CHART_RBAC = Path(__file__).resolve().parents[3] / "deploy/helm/gpucloud/templates/rbac.yaml"


def every_needed_verb() -> int:
    return sum(len(right.verbs) for right in NEEDED_RIGHTS)


def test_a_kubeconfig_with_no_rules_lacks_every_right() -> None:
    missing = missing_rights([])
    assert len(missing) == every_needed_verb()
    assert "create pods" in missing
    assert "create jobset.x-k8s.io/jobsets" in missing


def test_a_cluster_admin_lacks_nothing() -> None:
    assert missing_rights([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]) == []


def test_a_cluster_admin_holds_what_the_platform_must_not() -> None:
    """Review L3: reading Secrets, impersonating, escalating, binding cluster-wide."""
    excess = excess_rights([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}])
    assert {"get secrets", "impersonate users", "escalate rbac.authorization.k8s.io/clusterroles",
            "create rbac.authorization.k8s.io/clusterrolebindings"} <= set(excess)  # fmt: skip
    # The platform's own: Secrets written, never read; its two roles bound by name.
    own = [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create", "update", "delete"]},
        {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
         "verbs": ["bind"], "resourceNames": ["gpucloud-tenant-storage"]},
    ]  # fmt: skip
    assert excess_rights(own) == []


def test_a_rule_limited_to_named_objects_grants_nothing_the_platform_needs() -> None:
    named = {"apiGroups": [""], "resources": ["pods"], "verbs": ["*"], "resourceNames": ["a"]}
    assert "create pods" in missing_rights([named])


def test_a_read_only_kubeconfig_lacks_the_writes() -> None:
    read_only = {"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "list", "watch"]}
    missing = missing_rights([read_only])
    assert "get pods" not in missing
    assert {"create pods", "delete pods", "patch nodes", "create namespaces"} <= set(missing)


def test_the_charts_cluster_role_grants_every_right_a_cluster_must() -> None:
    """The chart's ClusterRole is what an operator applies in each cluster they
    register: a right added to the code and not to the chart fails here."""
    text = re.sub(r"\{\{.*?\}\}", "templated", CHART_RBAC.read_text())
    roles = [
        doc
        for doc in yaml.safe_load_all(text)
        if doc and doc["kind"] == "ClusterRole" and doc["metadata"]["name"] == "templated-instances"
    ]
    assert len(roles) == 1
    assert missing_rights(roles[0]["rules"]) == []


def a_node(
    name: str, zone: str, gpu_type: str | None, gpus: int, *, ready: bool = True
) -> dict[str, Any]:
    labels = {"topology.kubernetes.io/zone": zone}
    if gpu_type:
        labels["nvidia.com/gpu.product"] = gpu_type
    return {
        "metadata": {"name": name, "labels": labels},
        "status": {
            "allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "64"} if gpus else {"cpu": "8"},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def test_a_look_counts_nodes_zones_and_the_gpus_on_ready_nodes() -> None:
    nodes = [
        a_node("h1", "zone-a", "NVIDIA-H100", 8),
        a_node("h2", "zone-b", "NVIDIA-H100", 8),
        a_node("h3", "zone-b", "NVIDIA-H100", 8, ready=False),
        a_node("l1", "zone-a", "NVIDIA-L40S", 4),
        a_node("cpu", "zone-c", None, 0),
    ]
    status = summary(nodes, "v1.34.4", AT)
    assert (status["reachable"], status["version"], status["nodes"], status["ready_nodes"]) == (
        True, "v1.34.4", 5, 4,
    )  # fmt: skip
    assert status["zones"] == ["zone-a", "zone-b", "zone-c"]
    assert status["gpus"] == [
        {"gpu_type": "NVIDIA-H100", "resource": "nvidia.com/gpu", "capacity": 16},
        {"gpu_type": "NVIDIA-L40S", "resource": "nvidia.com/gpu", "capacity": 4},
    ]


def test_a_cluster_that_stops_answering_keeps_what_was_seen_and_since_when() -> None:
    seen = summary([a_node("h1", "zone-a", "NVIDIA-H100", 8)], "v1.34.4", AT)
    first = unreachable("connection refused", AT + timedelta(seconds=15), seen)
    later = unreachable("connection refused", AT + timedelta(seconds=30), first)
    assert (first["reachable"], first["unreachable_since"]) == (False, AT + timedelta(seconds=15))
    assert later["unreachable_since"] == AT + timedelta(seconds=15)
    assert (later["checked_at"], later["gpus"], later["error"]) == (
        AT + timedelta(seconds=30), seen["gpus"], "connection refused",
    )  # fmt: skip
    back = summary([], "v1.34.4", AT + timedelta(seconds=45))
    assert (back["reachable"], back["unreachable_since"]) == (True, None)
    never = unreachable("no answer within 10s", AT, None)
    assert (never["reachable"], never["unreachable_since"], never["nodes"]) == (False, AT, 0)


KUBECONFIG = """
apiVersion: v1
kind: Config
clusters:
- name: gpu-east
  cluster: {server: "https://10.1.2.3:6443/"}
contexts:
- name: platform
  context: {cluster: gpu-east, user: platform}
current-context: platform
users:
- name: platform
  user: {token: abc}
"""


def test_a_kubeconfig_names_the_api_server_of_its_current_context() -> None:
    assert kubeconfig_server(parsed_kubeconfig(KUBECONFIG)) == "https://10.1.2.3:6443"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("clusters: [", "not YAML"),
        ("just text", "names no cluster and context"),
        ("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\n", "names no cluster"),
    ],
)
def test_a_kubeconfig_that_cannot_be_used_is_refused_with_why(text: str, says: str) -> None:
    with pytest.raises(ValidationFailed, match=says) as refused:
        parsed_kubeconfig(text)
    assert refused.value.extensions == {"field": "kubeconfig"}


def test_a_kubeconfig_that_is_not_yaml_is_refused_without_echoing_it() -> None:
    secret = "token: s3cr3t-value-never-to-be-shown"
    with pytest.raises(ValidationFailed) as refused:
        parsed_kubeconfig(f"users:\n- user:\n    {secret}\n  : [")
    assert "s3cr3t" not in refused.value.detail
    assert "line" in refused.value.detail


def test_a_current_context_without_a_server_is_refused() -> None:
    config = parsed_kubeconfig(
        KUBECONFIG.replace("current-context: platform", "current-context: other")
    )
    with pytest.raises(ValidationFailed, match="names no cluster with a server"):
        kubeconfig_server(config)


def test_a_cluster_is_registered_once_by_name_by_address_and_by_identity() -> None:
    home: Any = {"_id": "local-1", "server": "https://127.0.0.1:6443", "uid": "u-1"}
    with pytest.raises(Conflict, match="'local-1' is registered"):
        not_registered("local-1", "https://10.0.0.9:6443", None, [home])
    with pytest.raises(Conflict, match="registered as 'local-1'"):
        not_registered("other", "https://127.0.0.1:6443", None, [home])
    with pytest.raises(Conflict, match="registered as 'local-1'"):
        not_registered("other", "https://localhost:6443", "u-1", [home])
    not_registered("other", "https://10.0.0.9:6443", "u-2", [home])  # a new one


def test_the_clusters_look_is_one_work_item() -> None:
    assert (str(CLUSTERS), WorkItem.parse("clusters")) == ("clusters", CLUSTERS)
