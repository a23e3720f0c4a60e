"""The native stack manager: fleet definition, clear failures, status and logs."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpucloud_stack import fleet, layout, supervisor
from gpucloud_stack.components import Component, Context
from gpucloud_stack.errors import StackError
from gpucloud_stack.secrets import Secrets

STACK = [sys.executable, str(Path(__file__).resolve().parents[1] / "deploy" / "local" / "stack.py")]


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
        "kafka", "postgres", "ferretdb", "minio",
        "gateway", "instances", "storage", "metering", "monitoring", "gpu-simulator",
    }  # fmt: skip
    assert all(row[2] == "healthy" for row in rows.values())


def test_logs_of_an_unknown_component_is_a_clear_error(stack_env: dict[str, str]) -> None:
    result = subprocess.run([*STACK, "logs", "kafak"], capture_output=True, text=True, check=False)
    assert result.returncode == 2
    assert "kafak: unknown component; one of: etcd, kube-apiserver" in result.stderr


def test_compose_matches_the_native_stack() -> None:
    """docker-compose.yml cannot run here, so keep it consistent with what does."""
    root = Path(__file__).resolve().parents[1]
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
