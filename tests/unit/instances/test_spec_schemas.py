"""What an instance spec may say (specs/schemas.py) and how a stored one reads back
(specs/service.py `spec_view`): whole GPUs, MIG slices or time-sliced replicas, each
with the resource its pods ask for and the part of a GPU a unit is billed at."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest
from pydantic import ValidationError

from gpucloud_instances.specs.schemas import SpecCreate
from gpucloud_instances.specs.service import spec_view
from gpucloud_libs.gpu_shares import GpuShare

from .fixtures import CREATED, a_spec

WHOLE = {"name": "h100x8", "cpu": "96", "memory": "1Ti", "gpuType": "NVIDIA-H100", "gpuNum": 8}


def spec(**fields: Any) -> SpecCreate:
    return SpecCreate.model_validate({**WHOLE, **fields})


def test_a_spec_is_of_whole_gpus_in_any_zone_unless_said() -> None:
    body = spec()
    assert (body.gpu_sharing, body.mig_profile, body.time_slicing_replicas) == ("none", None, None)
    assert body.zones == []
    assert body.share() == GpuShare.whole()


def test_a_mig_spec_asks_for_its_profiles_slices_at_their_part_of_a_gpu() -> None:
    share = spec(gpuSharing="mig", migProfile="2g.20gb").share()
    assert (share.resource, share.weight) == ("nvidia.com/mig-2g.20gb", Fraction(2, 7))


def test_a_time_sliced_spec_asks_for_one_replica_of_a_shared_gpu() -> None:
    share = spec(gpuNum=1, gpuSharing="time-sliced", timeSlicingReplicas=4).share()
    assert (share.resource, share.weight) == ("nvidia.com/gpu.shared", Fraction(1, 4))


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({"gpuSharing": "mig"}, "migProfile is given exactly when"),
        ({"migProfile": "1g.5gb"}, "migProfile is given exactly when"),
        ({"gpuSharing": "time-sliced", "gpuNum": 1}, "timeSlicingReplicas is given exactly"),
        ({"timeSlicingReplicas": 2}, "timeSlicingReplicas is given exactly"),
        ({"gpuSharing": "time-sliced", "timeSlicingReplicas": 4}, "asks for gpuNum 1"),
        ({"gpuSharing": "mig", "migProfile": "8g.80gb"}, "should match pattern"),
        ({"gpuSharing": "time-sliced", "gpuNum": 1, "timeSlicingReplicas": 1}, "greater than or equal to 2"),
    ],
)  # fmt: skip
def test_a_spec_states_its_sharing_completely_or_is_refused(
    fields: dict[str, Any], why: str
) -> None:
    with pytest.raises(ValidationError, match=why):
        spec(**fields)


@pytest.mark.parametrize(
    "fields",
    [{"cpu": "8 cores"}, {"memory": "64GB"}, {"memory": "-1Gi"}, {"gpuNum": 0}, {"gpuNum": 17},
     {"name": "H100"}, {"gpuType": "NVIDIA H100"}, {"zones": ["zone a"]}, {"gpuSharing": "mps"}],
)  # fmt: skip
def test_a_spec_with_a_malformed_quantity_name_or_label_is_refused(fields: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        spec(**fields)


@pytest.mark.parametrize(
    ("cpu", "memory"), [("500m", "512Mi"), ("1.5", "1.5Gi"), ("8", "68719476736")]
)
def test_kubernetes_quantities_are_taken_as_written(cpu: str, memory: str) -> None:
    body = spec(cpu=cpu, memory=memory)
    assert (body.cpu, body.memory) == (cpu, memory)


def test_a_spec_stored_before_shared_gpus_reads_back_as_whole_gpus() -> None:
    view = spec_view(a_spec(name="h100-1", zones=["zone-a"]))
    assert (view.gpu_sharing, view.gpu_resource, view.gpu_weight) == ("none", "nvidia.com/gpu", "1")
    assert (view.mig_profile, view.time_slicing_replicas) == (None, None)
    assert (view.name, view.gpu_num, view.zones) == ("h100-1", 1, ["zone-a"])
    assert view.created_at == CREATED


def test_a_mig_spec_reads_back_its_profile_from_its_resource() -> None:
    view = spec_view(a_spec(gpu_resource="nvidia.com/mig-3g.40gb", gpu_weight="3/7", gpu_num=2))
    assert (view.gpu_sharing, view.mig_profile, view.gpu_weight) == ("mig", "3g.40gb", "3/7")
    assert view.time_slicing_replicas is None


def test_a_time_sliced_spec_reads_back_its_replicas_from_its_weight() -> None:
    view = spec_view(a_spec(gpu_resource="nvidia.com/gpu.shared", gpu_weight="1/8"))
    assert (view.gpu_sharing, view.time_slicing_replicas) == ("time-sliced", 8)
    assert view.mig_profile is None


def test_a_created_spec_reads_back_as_it_was_asked_for() -> None:
    """What `Specs.create` stores from a body, `spec_view` shows as the same body."""
    for body in (
        spec(),
        spec(gpuSharing="mig", migProfile="1g.10gb", zones=["zone-a"]),
        spec(gpuNum=1, gpuSharing="time-sliced", timeSlicingReplicas=3),
    ):
        share = body.share()
        stored = a_spec(
            name=body.name, cpu=body.cpu, memory=body.memory, gpu_type=body.gpu_type,
            gpu_num=body.gpu_num, zones=body.zones, gpu_resource=share.resource,
            gpu_weight=str(share.weight),
        )  # fmt: skip
        view = spec_view(stored)
        shown = view.model_dump(exclude={"gpu_resource", "gpu_weight", "created_at"})
        assert SpecCreate.model_validate(shown) == body
