"""The admission rules every workload kind shares: what it copies from its spec."""

from __future__ import annotations

from gpucloud_instances.admission import Placed, allowed_zones, spec_fields
from gpucloud_instances.documents import SpecDoc

from .fixtures import a_spec

SPEC = a_spec(
    name="h100x2",
    cpu="16",
    memory="128Gi",
    gpu_type="NVIDIA-H100",
    gpu_num=2,
    zones=["zone-a", "zone-b"],
)


def test_a_workload_copies_its_specs_shape_the_zones_it_may_run_in_and_its_cluster() -> None:
    fields = spec_fields(SPEC, allowed_zones(SPEC, "zone-b"), Placed("local-1", "region-1"))
    assert fields == {
        "spec_name": "h100x2", "gpu_type": "NVIDIA-H100", "gpu_count": 2,
        "gpu_resource": "nvidia.com/gpu", "gpu_weight": "1", "cpu": "16", "memory": "128Gi",
        "zones": ["zone-b"], "cluster": "local-1", "region": "region-1",
    }  # fmt: skip


def test_a_shared_gpu_spec_passes_on_its_kind_and_weight() -> None:
    shared: SpecDoc = {**SPEC, "gpu_resource": "nvidia.com/mig-1g.10gb", "gpu_weight": "1/7"}
    fields = spec_fields(shared, [], Placed("local-1", "region-1"))
    assert (fields["gpu_resource"], fields["gpu_weight"]) == ("nvidia.com/mig-1g.10gb", "1/7")
    assert fields["zones"] == []
