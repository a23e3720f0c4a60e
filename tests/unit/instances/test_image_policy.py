"""The operator's registry allow-list, which the local stack leaves empty."""

from __future__ import annotations

import pytest

from gpucloud_instances.templates.catalog import ImagePolicy
from gpucloud_libs.errors import ValidationFailed


def test_an_allow_list_admits_its_registries_alone() -> None:
    policy = ImagePolicy(("nvcr.io", "docker.io", "Registry.Example.com:5000"))
    for image in ("nvcr.io/nvidia/pytorch:24.01-py3", "busybox", "library/ubuntu:24.04",
                  "registry.example.com:5000/team/model:1"):  # fmt: skip
        policy.admit(image, 1000, uid_field="runAsUser")
    with pytest.raises(ValidationFailed) as refused:
        policy.admit("ghcr.io/someone/miner:1", 1000, uid_field="runAsUser")
    assert refused.value.extensions["errors"][0]["loc"] == ["body", "image"]
    assert "not from ghcr.io" in refused.value.detail


def test_without_an_allow_list_any_registry_is_admitted() -> None:
    ImagePolicy(()).admit("ghcr.io/someone/tool:1", 1000, uid_field="runAsUser")
