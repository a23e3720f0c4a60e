"""Whole and shared GPUs (gpucloud_libs.gpu_shares): a stored workload reads back as
the share it was given, each kind says how it is shared, quota rounds weighted units
up to whole GPUs, and only the device plugin's three GPU resources count as GPUs."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from gpucloud_libs.gpu_shares import (
    SHARED_GPU_RESOURCE,
    GpuShare,
    gpu_units,
    is_gpu_resource,
)
from gpucloud_libs.naming import GPU_RESOURCE

H100 = "NVIDIA-H100-80GB-HBM3"


@pytest.mark.parametrize(
    "doc",
    [
        {},
        {"gpu_resource": None, "gpu_weight": None},
        {"gpu_resource": GPU_RESOURCE, "gpu_weight": "1"},
    ],
    ids=["older-document", "explicit-none", "whole"],
)
def test_a_document_from_before_shared_gpus_holds_whole_gpus(doc: dict[str, Any]) -> None:
    share = GpuShare.of(doc)
    assert share == GpuShare.whole()
    assert (share.resource, share.weight, share.sharing) == (GPU_RESOURCE, Fraction(1), "none")


def test_a_stored_shared_workload_reads_back_as_the_share_it_was_given() -> None:
    for share in (GpuShare.mig("2g.20gb"), GpuShare.replica(3)):
        stored = {"gpu_resource": share.resource, "gpu_weight": str(share.weight)}
        assert GpuShare.of(stored) == share


def test_a_weight_without_a_resource_is_of_whole_gpus() -> None:
    assert GpuShare.of({"gpu_weight": "1/2"}) == GpuShare(GPU_RESOURCE, Fraction(1, 2))


@pytest.mark.parametrize(
    ("profile", "weight"),
    [("1g.5gb", Fraction(1, 7)), ("2g.10gb", Fraction(2, 7)), ("7g.80gb", Fraction(1)),
     ("1g.10gb+me", Fraction(1, 7)), ("4g.40gb", Fraction(4, 7))],
)  # fmt: skip
def test_a_mig_profile_weighs_its_compute_slices_out_of_seven(
    profile: str, weight: Fraction
) -> None:
    share = GpuShare.mig(profile)
    assert share.weight == weight
    assert share.resource == f"nvidia.com/mig-{profile}"
    assert (share.sharing, share.time_sliced) == ("mig", False)


@pytest.mark.parametrize(
    "profile", ["0g.5gb", "1g", "1g.5GB", "1g.5gb+mx", "g.5gb", "1g.1234gb", ""]
)
def test_a_name_that_is_no_mig_profile_is_refused(profile: str) -> None:
    with pytest.raises(ValueError, match="is not a MIG profile"):
        GpuShare.mig(profile)


def test_a_time_sliced_gpu_is_shared_by_two_replicas_or_more() -> None:
    share = GpuShare.replica(2)
    assert (share.resource, share.weight) == (SHARED_GPU_RESOURCE, Fraction(1, 2))
    assert (share.sharing, share.time_sliced) == ("time-sliced", True)
    for replicas in (1, 0, -4):
        with pytest.raises(ValueError, match="2 replicas or more"):
            GpuShare.replica(replicas)


def test_only_time_sliced_gpus_share_memory_between_tenants() -> None:
    assert not GpuShare.whole().time_sliced
    assert not GpuShare.mig("1g.5gb").time_sliced
    assert GpuShare.replica(8).time_sliced


@pytest.mark.parametrize(
    ("share", "units", "gpus"),
    [
        (GpuShare.whole(), 0, 0),
        (GpuShare.whole(), 8, 8),
        (GpuShare.replica(4), 1, 1),
        (GpuShare.replica(4), 4, 1),
        (GpuShare.replica(4), 5, 2),
        (GpuShare.mig("3g.40gb"), 2, 1),  # 6/7 of a GPU
        (GpuShare.mig("3g.40gb"), 3, 2),  # 9/7
        (GpuShare.mig("7g.80gb"), 3, 3),
        (GpuShare(GPU_RESOURCE, Fraction(2)), 3, 6),
    ],
)
def test_quota_counts_the_weighted_units_rounded_up_to_whole_gpus(
    share: GpuShare, units: int, gpus: int
) -> None:
    assert share.quota_gpus(units) == gpus


def test_time_sliced_replicas_come_from_their_own_pool() -> None:
    assert GpuShare.replica(4).capacity_key(H100) == f"{H100} gpu.shared"
    assert GpuShare.replica(4).capacity_key(H100) != GpuShare.replica(2).capacity_key("x")
    assert GpuShare.mig("1g.5gb").capacity_key(H100) != GpuShare.mig("2g.10gb").capacity_key(H100)


@pytest.mark.parametrize(
    ("name", "is_gpu"),
    [
        ("nvidia.com/gpu", True),
        ("nvidia.com/gpu.shared", True),
        ("nvidia.com/mig-1g.5gb", True),
        ("nvidia.com/gpu.product", False),  # a label, not a resource
        ("nvidia.com/gpu-foo", False),
        ("amd.com/gpu", False),
        ("cpu", False),
    ],
)
def test_only_the_device_plugins_three_kinds_are_gpu_resources(name: str, is_gpu: bool) -> None:
    assert is_gpu_resource(name) is is_gpu


def test_gpu_units_keeps_the_gpu_resources_as_whole_numbers() -> None:
    allocatable = {
        "cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8", "nvidia.com/mig-1g.5gb": 14,
        "nvidia.com/gpu.shared": "32", "ephemeral-storage": "100Gi",
    }  # fmt: skip
    assert gpu_units(allocatable) == {
        "nvidia.com/gpu": 8,
        "nvidia.com/mig-1g.5gb": 14,
        "nvidia.com/gpu.shared": 32,
    }
    assert gpu_units({"cpu": "1"}) == {}
