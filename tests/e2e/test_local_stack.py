"""The native stack manager: fleet definition, clear failures, status and logs."""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import cast

import pytest
import yaml
from cryptography import x509

from gpucloud_stack import compose_jobset, fleet, jobset, layout, supervisor
from gpucloud_stack.components import (
    ALL,
    CEPH,
    GPU_SIMULATOR_LOCAL_2,
    SECOND_CLUSTER,
    Component,
    Context,
)
from gpucloud_stack.errors import StackError
from gpucloud_stack.secrets import Secrets

from .conftest import stack_service_env

STACK = [sys.executable, str(Path(__file__).resolve().parents[2] / "deploy" / "local" / "stack.py")]


def test_default_fleet_mixes_three_gpu_types_over_two_zones() -> None:
    nodes = fleet.node_manifests()
    by_product: dict[str, int] = {}
    for node in nodes:
        labels = node["metadata"]["labels"]
        by_product[labels["nvidia.com/gpu.product"]] = (
            by_product.get(labels["nvidia.com/gpu.product"], 0) + 1
        )
        assert labels["topology.kubernetes.io/zone"] in {"zone-a", "zone-b"}
        capacity = node["status"]["capacity"]
        shared = [
            name for name in capacity if name.startswith(("nvidia.com/mig-", "nvidia.com/gpu."))
        ]
        # A node's GPUs are advertised whole, or all shared out (MIG, time-slicing).
        assert capacity["nvidia.com/gpu"] == ("0" if shared else labels["nvidia.com/gpu.count"])
        assert node["spec"]["taints"] == [fleet.GPU_TAINT]
        assert node["metadata"]["annotations"] == {"kwok.x-k8s.io/node": "fake"}
    assert by_product == {
        "NVIDIA-H100-80GB-HBM3": 4,
        "NVIDIA-A100-SXM4-40GB": 5,  # one of them in MIG mode
        "NVIDIA-L40S": 4,
        "NVIDIA-L40S-SHARED": 1,
    }


def test_fleet_comes_from_the_config_file(tmp_path: Path) -> None:
    config = tmp_path / "fleet.toml"
    config.write_text(
        """
[[pool]]
name = "b200"
zones = ["zone-c"]
count = 3
gpus = 8
gpu_product = "NVIDIA-B200"
gpu_memory_mib = 183359
gpu_family = "blackwell"
cpu = "224"
memory = "2Ti"
instance_type = "gpu-8xb200"
"""
    )
    names = [node["metadata"]["name"] for node in fleet.node_manifests(config)]
    assert names == ["b200-zone-c-0", "b200-zone-c-1", "b200-zone-c-2"]


def test_the_second_cluster_has_its_own_region_gpu_type_and_pod_addresses() -> None:
    """Seed 000's second region: a GPU type the first lacks, node names no other
    cluster uses (monitoring knows nodes by name), and loopback pod ranges of its own,
    so a pod's address names one cluster."""
    first = fleet.node_manifests()
    second = fleet.node_manifests(layout.LOCAL_DIR / layout.LOCAL_2.fleet_file)
    assert {n["metadata"]["name"] for n in first}.isdisjoint(n["metadata"]["name"] for n in second)
    labels = [n["metadata"]["labels"] for n in second]
    assert {
        (lb["topology.kubernetes.io/region"], lb["topology.kubernetes.io/zone"]) for lb in labels
    } == {("local-2", "zone-c")}
    products = {lb["nvidia.com/gpu.product"] for lb in labels}
    assert "NVIDIA-B200" in products
    assert "NVIDIA-B200" not in {n["metadata"]["labels"]["nvidia.com/gpu.product"] for n in first}
    assert all(n["spec"]["podCIDR"].startswith("127.96.") for n in second)
    assert all(n["spec"]["podCIDR"].startswith("127.64.") for n in first)


@pytest.fixture
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Context:
    monkeypatch.setenv("GPUCLOUD_HOME", str(tmp_path))
    secrets = Secrets()
    return Context(secrets=secrets, pki=tmp_path)


def test_a_taken_port_is_reported_with_the_component_and_port(isolated_home: Context) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        component = Component(
            name="demo",
            kind="infra",
            argv=lambda _ctx: ["/bin/sleep", "30"],
            healthy=lambda _ctx: False,
            ports=(port,),
        )
        with pytest.raises(StackError, match=f"port {port} is already taken") as raised:
            supervisor.launch(component, isolated_home)
    assert raised.value.component == "demo"


def test_a_component_that_dies_at_start_shows_its_log(isolated_home: Context) -> None:
    component = Component(
        name="crasher",
        kind="infra",
        argv=lambda _ctx: ["/bin/sh", "-c", "echo 'listen tcp: address in use' >&2; exit 3"],
        healthy=lambda _ctx: False,
        ports=(),
        start_timeout_s=10,
    )
    assert supervisor.launch(component, isolated_home)
    with pytest.raises(StackError) as raised:
        supervisor.wait_healthy(component, isolated_home)
    message = str(raised.value)
    assert "crasher: exited during start-up" in message
    assert "listen tcp: address in use" in message
    assert raised.value.log is not None
    assert raised.value.log.name == "crasher.log"


def test_status_lists_every_component_healthy(stack_env: dict[str, str]) -> None:
    result = subprocess.run([*STACK, "status"], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines()[1:-1]}
    assert set(rows) == {
        "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok",
        "kube-apiserver-local-2", "kube-controller-manager-local-2", "kube-scheduler-local-2",
        "kwok-local-2", "kafka", "postgres", "ferretdb", "minio",
        "gateway", "instances", "storage", "metering", "monitoring", "gpu-simulator",
        "gpu-simulator-local-2",
    }  # fmt: skip
    assert all(row[2] == "healthy" for row in rows.values())


def test_logs_of_an_unknown_component_is_a_clear_error(stack_env: dict[str, str]) -> None:
    result = subprocess.run([*STACK, "logs", "kafak"], capture_output=True, text=True, check=False)
    assert result.returncode == 2
    assert "kafak: unknown component; one of: etcd, kube-apiserver" in result.stderr


#: What runs each native component in docker-compose.yml. The control plane is one
#: kwok cluster image there; MongoDB's wire is FerretDB on PostgreSQL here, MongoDB
#: there. Ceph is the second object store the tests run, not a deployment's.
COMPOSE_RUNS = {
    "etcd": "kwok", "kube-apiserver": "kwok", "kube-controller-manager": "kwok",
    "kube-scheduler": "kwok", "kwok": "kwok", "kafka": "kafka", "postgres": "mongo",
    "ferretdb": "mongo", "minio": "minio", "jobset": "jobset", "gateway": "gateway",
    "instances": "instances", "storage": "storage", "metering": "metering",
    "monitoring": "monitoring", "gpu-simulator": "gpu-simulator",
}  # fmt: skip
#: One-shot steps compose runs where the native stack does the same in-process.
COMPOSE_STEPS = {"kafka-access", "minio-access", "jobset-setup", "fleet"}
#: Compose runs one cluster; the second region is the native stack's, for the tests
#: of many clusters (docs/clusters.md).
NATIVE_ONLY = {c.name for c in SECOND_CLUSTER} | {GPU_SIMULATOR_LOCAL_2.name}


def test_compose_runs_what_the_native_stack_runs() -> None:
    native = {c.name for c in ALL if c not in CEPH} - NATIVE_ONLY
    assert native == set(COMPOSE_RUNS), "a native component has no compose counterpart"
    compose = yaml.safe_load((layout.REPO_ROOT / "docker-compose.yml").read_text())["services"]
    assert set(compose) == set(COMPOSE_RUNS.values()) | COMPOSE_STEPS
    assert compose["jobset"]["image"] == f"registry.k8s.io/jobset/jobset:{layout.JOBSET_VERSION}"
    assert compose["kwok"]["image"].startswith(
        f"registry.k8s.io/kwok/cluster:{layout.KWOK_VERSION}-"
    )
    simulator = compose["gpu-simulator"]
    assert simulator["command"][:4] == ["python", "-m", "gpucloud_agent", "--simulate"]
    assert simulator["environment"]["GPUCLOUD_KAFKA_USERNAME"] == "gpucloud-agent"
    assert "GPUCLOUD_KAFKA_PASSWORD_AGENT" in compose["kafka-access"]["environment"]


def test_compose_installs_jobset_as_the_native_stack_does(tmp_path: Path) -> None:
    """Same webhooks, reached at the controller's compose name over a certificate the
    API server can check; the CRD goes first."""
    ca_pem = compose_jobset.issue_certificate(tmp_path, "jobset")
    assert compose_jobset.issue_certificate(tmp_path, "jobset") == ca_pem  # kept on rerun
    serving = x509.load_pem_x509_certificate((tmp_path / "certs" / "tls.crt").read_bytes())
    ca = x509.load_pem_x509_certificate(ca_pem)
    serving.verify_directly_issued_by(ca)
    names = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["jobset"]
    applied = compose_jobset.objects(ca_pem, "jobset", crd="kind: CustomResourceDefinition")
    assert applied[0] == (jobset.CRD_PATH, "kind: CustomResourceDefinition")
    native = dict(jobset.webhook_configurations("https://127.0.0.1:10263", "native-ca"))
    for path, body in applied[1:]:
        hooks = json.loads(body)["webhooks"]
        assert {hook["clientConfig"]["url"].split("/")[2] for hook in hooks} == {"jobset:9443"}
        assert {hook["clientConfig"]["caBundle"] for hook in hooks} == {
            base64.b64encode(ca_pem).decode()
        }
        same_hooks = cast(list[dict[str, object]], native[path]["webhooks"])
        for hook, same in zip(hooks, same_hooks, strict=True):
            assert {**hook, "clientConfig": None} == {**same, "clientConfig": None}


def test_compose_matches_the_native_stack() -> None:
    """docker-compose.yml cannot run here, so keep it consistent with what does."""
    root = Path(__file__).resolve().parents[2]
    rendered = json.loads((root / "deploy" / "compose" / "fleet-nodes.json").read_text())
    assert rendered["items"] == fleet.node_manifests(), (
        "regenerate: python3 deploy/local/stack.py fleet"
    )
    compose = yaml.safe_load((root / "docker-compose.yml").read_text())
    assert compose["services"]["kafka"]["image"] == f"apache/kafka:{layout.KAFKA_VERSION}"
    assert set(compose["services"]) >= {"gateway", "instances", "storage", "metering", "monitoring"}
    # Kafka authenticates there too: each service as its own principal, after the access step.
    kafka_env = compose["services"]["kafka"]["environment"]
    assert kafka_env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].count("SASL_PLAINTEXT") == 3
    assert kafka_env["KAFKA_ALLOW_EVERYONE_IF_NO_ACL_FOUND"] == "false"
    access = compose["services"]["kafka-access"]
    assert access["command"] == ["python", "-m", "gpucloud_libs.kafka_access"]
    for name in ("gateway", "instances", "storage", "metering", "monitoring"):
        service = compose["services"][name]
        assert service["environment"]["GPUCLOUD_KAFKA_USERNAME"] == f"gpucloud-{name}"
        assert f"KAFKA_PASSWORD_{name.upper()}" in service["environment"]["GPUCLOUD_KAFKA_PASSWORD"]
        assert f"GPUCLOUD_KAFKA_PASSWORD_{name.upper()}" in access["environment"]
        assert (
            service["depends_on"]["kafka-access"]["condition"] == "service_completed_successfully"
        )
    # MinIO's root credentials go to the minio-access step alone; storage has its own user.
    assert compose["services"]["minio-access"]["command"][-1] == "gpucloud_storage.minio_access"
    for name in ("gateway", "instances", "metering", "monitoring"):
        assert "GPUCLOUD_S3_SECRET_KEY" not in compose["services"][name]["environment"], name
    storage_env = compose["services"]["storage"]["environment"]
    assert storage_env["GPUCLOUD_S3_ACCESS_KEY"] == "gpucloud-storage"


@pytest.mark.parametrize("service", ["gateway", "instances", "storage", "metering", "monitoring"])
def test_a_services_printed_settings_are_those_it_runs_with(service: str) -> None:
    """`stack env --service` is how a test or a benchmark runs a second copy of a service:
    it must run as the stack's own does (a copy without the storage subject once
    computed another tenant layout and re-applied every namespace)."""
    pid = int(layout.pid_file(service).read_text())
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    running = dict(item.decode().split("=", 1) for item in raw if item.startswith(b"GPUCLOUD_"))
    printed = stack_service_env(service)
    # Its address, and what it inherited from the shell that ran `up` (GPUCLOUD_HOME).
    left_out = {"GPUCLOUD_HTTP_HOST", "GPUCLOUD_HTTP_PORT", *os.environ}
    assert {k: v for k, v in running.items() if k not in left_out} == {
        k: v for k, v in printed.items() if k not in left_out
    }
