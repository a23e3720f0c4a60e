"""A tenant may not select GPUs through the environment; a record stored before that
rule still reads back."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gpucloud_instances.schemas import STORED, EnvVar, InstanceTemplate

from .fixtures import a_pod


@pytest.mark.parametrize(
    "name", ["NVIDIA_VISIBLE_DEVICES", "nvidia_driver_capabilities", "CUDA_VISIBLE_DEVICES",
             "CUDA_MPS_PIPE_DIRECTORY", "GPU_DEVICE_ORDINAL"],
)  # fmt: skip
def test_a_request_naming_a_device_selector_is_refused(name: str) -> None:
    with pytest.raises(ValidationError, match="below the allocation"):
        EnvVar.model_validate({"name": name, "value": "all"})


def test_a_stored_record_with_one_still_reads_back() -> None:
    stored = {"envs": [{"name": "CUDA_VISIBLE_DEVICES", "value": "0"}]}
    template = InstanceTemplate.model_validate(stored, context=STORED)
    assert [env.name for env in template.envs] == ["CUDA_VISIBLE_DEVICES"]
    assert EnvVar.model_validate({"name": "CUDA_HOME", "value": "/usr/local/cuda"}).name


def test_a_stored_device_selector_never_reaches_a_pod() -> None:
    stored = {"envs": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
                       {"name": "MODE", "value": "dev"}]}  # fmt: skip
    template = InstanceTemplate.model_validate(stored, context=STORED)
    pod = a_pod(template=template)  # the one writer of a pod's env
    container = pod.container()
    assert container["env"] == [{"name": "MODE", "value": "dev"}]
