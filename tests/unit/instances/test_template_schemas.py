"""What a workload's template may hold (schemas.py): ports, probes, env, volumes and the
user it runs as, each refused with a 422 when inconsistent; the image reference's form;
and the camelCase wire names a client writes."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

from gpucloud_instances.schemas import (
    STORED,
    EnvVar,
    ImageRef,
    InstanceTemplate,
    PortSpec,
    VolumeSpec,
    is_device_selector,
)

IMAGE = TypeAdapter(ImageRef)


def refused(body: dict[str, Any], match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        InstanceTemplate.model_validate(body)


def test_an_empty_template_leaves_everything_to_the_image() -> None:
    template = InstanceTemplate.model_validate({})
    assert (template.ports, template.envs, template.volumes) == ([], [], [])
    assert (template.cmd, template.command, template.args, template.run_as_user) == (
        None, None, None, None,
    )  # fmt: skip


def test_a_shell_line_and_an_entrypoint_list_are_not_given_together() -> None:
    refused({"cmd": "serve", "command": ["serve"]}, "either `cmd`")
    refused({"cmd": "serve", "args": ["--port", "1"]}, "either `cmd`")
    assert InstanceTemplate.model_validate({"cmd": "serve --port 1"}).cmd == "serve --port 1"
    both = InstanceTemplate.model_validate({"command": ["serve"], "args": ["--port", "1"]})
    assert (both.command, both.args) == (["serve"], ["--port", "1"])


def test_each_port_number_is_given_once_and_at_most_one_is_the_probe() -> None:
    refused(
        {"ports": [{"port": 80}, {"port": 80, "protocol": "UDP"}]}, "port numbers must be unique"
    )
    refused(
        {"ports": [{"port": 80, "isProbe": True}, {"port": 81, "isProbe": True}]}, "at most one"
    )
    one = InstanceTemplate.model_validate({"ports": [{"port": 80, "isProbe": True}, {"port": 81}]})
    assert [port.is_probe for port in one.ports] == [True, False]


@pytest.mark.parametrize(
    "port",
    [{"port": 0}, {"port": 65536}, {"port": 80, "protocol": "HTTP"},
     {"port": 80, "baseUrl": "lab"}, {"port": 80, "baseUrl": "/my lab"}],
)  # fmt: skip
def test_a_port_out_of_range_or_with_a_malformed_base_url_is_refused(port: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        PortSpec.model_validate(port)


def test_a_port_is_private_tcp_and_no_probe_unless_said() -> None:
    port = PortSpec.model_validate({"port": 8888})
    assert (port.protocol, port.base_url) == ("TCP", None)
    assert (port.is_public, port.is_probe) == (False, False)


def test_env_names_are_unique_and_shell_safe() -> None:
    twice = [{"name": "MODE", "value": "a"}, {"name": "MODE", "value": "b"}]
    refused({"envs": twice}, "environment variable names must be unique")
    for name in ("1ST", "MY-VAR", "A B", ""):
        with pytest.raises(ValidationError):
            EnvVar.model_validate({"name": name, "value": "x"})
    assert EnvVar.model_validate({"name": "_private9", "value": ""}).value == ""


@pytest.mark.parametrize(
    "name", ["ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "nvidia_mig_config_devices",
             "CUDA_MPS_LOG_DIRECTORY"],
)  # fmt: skip
def test_amd_and_nvidia_device_selectors_are_all_refused(name: str) -> None:
    assert is_device_selector(name)
    with pytest.raises(ValidationError, match="below the allocation"):
        EnvVar.model_validate({"name": name, "value": "0"})


@pytest.mark.parametrize("name", ["NVIDIA", "MY_CUDA_VISIBLE_DEVICES", "CUDA_HOME", "GPU_COUNT"])
def test_names_that_only_resemble_a_device_selector_are_the_tenants_own(name: str) -> None:
    assert not is_device_selector(name)
    assert EnvVar.model_validate({"name": name, "value": "1"}).name == name


def test_a_stored_template_reads_back_with_a_device_selector_a_request_may_not_hold() -> None:
    stored = {"envs": [{"name": "HIP_VISIBLE_DEVICES", "value": "0"}]}
    assert InstanceTemplate.model_validate(stored, context=STORED).envs[0].value == "0"
    refused(stored, "below the allocation")


def test_volumes_have_unique_names_and_mount_paths() -> None:
    refused(
        {"volumes": [{"name": "a", "mountPath": "/a"}, {"name": "a", "mountPath": "/b"}]},
        "volume names must be unique",
    )
    refused(
        {"volumes": [{"name": "a", "mountPath": "/data"}, {"name": "b", "mountPath": "/data"}]},
        "volume mount paths must be unique",
    )


@pytest.mark.parametrize(
    "volume",
    [{"name": "Data", "mountPath": "/data"}, {"name": "data", "mountPath": "data"},
     {"name": "data", "mountPath": "/data", "storageID": "Vol_1"}, {"name": "-data", "mountPath": "/d"}],
)  # fmt: skip
def test_a_volume_needs_a_dns_label_name_and_an_absolute_path(volume: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        VolumeSpec.model_validate(volume)


def test_a_volume_storage_is_mounted_by_its_claim_and_scratch_space_has_none() -> None:
    storage = VolumeSpec.model_validate({"name": "d", "mountPath": "/d", "storageID": "vol-1"})
    assert storage.claim_name == "gpc-storage-vol-1"
    assert VolumeSpec.model_validate({"name": "d", "mountPath": "/d"}).claim_name is None


def test_a_container_may_not_be_asked_to_run_as_root() -> None:
    refused({"runAsUser": 0}, "greater than or equal to 1")
    refused({"runAsUser": 2**31}, "less than or equal to")
    assert InstanceTemplate.model_validate({"runAsUser": 1}).run_as_user == 1


def test_unknown_fields_and_nul_characters_are_refused_not_dropped() -> None:
    refused({"ports": [], "privileged": True}, "Extra inputs are not permitted")
    refused({"cmd": "serve\x00"}, "NUL characters are not allowed")
    refused({"envs": [{"name": "A", "value": "x\x00y"}]}, "NUL characters are not allowed")


def test_the_wire_names_are_camel_case_and_python_names_are_accepted_too() -> None:
    body = {
        "ports": [{"port": 80, "isPublic": True, "isProbe": True, "baseUrl": "/"}],
        "volumes": [{"name": "d", "mountPath": "/d", "readOnly": True, "storageID": "v1"}],
        "runAsUser": 1000,
    }
    template = InstanceTemplate.model_validate(body)
    dumped = template.model_dump(by_alias=True, exclude_defaults=True)
    assert dumped == body
    assert InstanceTemplate.model_validate({"run_as_user": 7}).run_as_user == 7


@pytest.mark.parametrize(
    "image",
    ["busybox", "pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime", "ghcr.io/org/tool:1",
     "registry.example.com:5000/team/model@sha256:" + "a" * 64],
)  # fmt: skip
def test_images_named_by_a_public_registry_or_docker_hub_are_taken(image: str) -> None:
    assert IMAGE.validate_python(image) == image


@pytest.mark.parametrize(
    "image",
    ["registry:5000/x", "169.254.169.254/x:1", "[fd00::1]:5000/x", "cache.svc/x",
     "registry.kube-system.svc.cluster.local/x", "mirror.internal/x", "nas.home.arpa/x",
     "0x7f.0x1/x"],
)  # fmt: skip
def test_images_from_an_address_or_a_name_only_the_node_network_knows_are_refused(
    image: str,
) -> None:
    with pytest.raises(ValidationError, match="public DNS name"):
        IMAGE.validate_python(image)


@pytest.mark.parametrize("image", ["", "my image", "x" * 513])
def test_an_image_reference_is_one_word_of_at_most_512_characters(image: str) -> None:
    with pytest.raises(ValidationError):
        IMAGE.validate_python(image)


def test_only_a_tcp_port_can_be_the_readiness_probe() -> None:
    """Kubernetes probes over TCP or HTTP: a UDP probe port would never be ready."""
    with pytest.raises(ValidationError, match="needs a TCP port, not UDP"):
        PortSpec.model_validate({"port": 53, "protocol": "UDP", "isProbe": True})
    assert PortSpec.model_validate({"port": 53, "protocol": "UDP"}).protocol == "UDP"
    stored = PortSpec.model_validate(
        {"port": 53, "protocol": "UDP", "isProbe": True}, context=STORED
    )
    assert stored.is_probe  # one stored before the rule stays readable
