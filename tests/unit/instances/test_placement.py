"""Which cluster a new workload goes to (clusters/placement.py, decision 129): one
with a warm unit of the spec, else the home cluster when it has the GPU kind, else
the one with the most of them free; a region asked for honoured, or refused with the
regions that would do; cordoned and unanswering clusters passed over; the pools the admission pass counts per cluster
(controller/capacity.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from gpucloud_instances.clusters.documents import ClusterDoc, ClusterGpusDoc, ClusterStatusDoc
from gpucloud_instances.clusters.placement import choose_cluster, home_for_volumes
from gpucloud_instances.controller.capacity import GpuAccounting, across_clusters
from gpucloud_libs.errors import Conflict, ValidationFailed

AT = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
WHOLE = "nvidia.com/gpu"
H100, B200, A100 = "NVIDIA-H100", "NVIDIA-B200", "NVIDIA-A100"


def cluster(
    name: str, region: str, *, home: bool = False, state: str = "active",
    gpus: dict[str, tuple[int, int]] | None = None, zones: list[str] | None = None,
    reachable: bool = True, looked: bool = True, warm: dict[str, int] | None = None,
) -> ClusterDoc:  # fmt: skip
    """A cluster as stored: `gpus` maps a GPU type to (capacity, free) whole GPUs,
    `warm` a spec to its stock's available units."""
    status = ClusterStatusDoc(
        reachable=reachable, checked_at=AT, unreachable_since=None if reachable else AT,
        version="v1.34.4", nodes=3, ready_nodes=3, zones=zones or [], error=None,
        gpus=[
            ClusterGpusDoc(gpu_type=kind, resource=WHOLE, capacity=capacity, free=free)
            for kind, (capacity, free) in (gpus or {}).items()
        ],
        warm=warm or {},
    )  # fmt: skip
    return ClusterDoc(
        _id=name, region=region, zones=zones or [], home=home, server=None, uid=None,
        sealed_kubeconfig=None, state=state, status=status if looked else None, created_at=AT,
    )  # fmt: skip


def fleet(**changes: Any) -> list[ClusterDoc]:
    """The local stack's two clusters: home with H100s and A100s in two zones, the
    second with B200s and H100s in a third."""
    home = {"home": True, "gpus": {H100: (32, 4), A100: (8, 8)}, "zones": ["zone-a", "zone-b"]}
    second = {"gpus": {B200: (16, 16), H100: (8, 8)}, "zones": ["zone-c"]}
    return [
        cluster("local-1", "local-1", **{**home, **changes.get("home", {})}),
        cluster("local-2", "local-2", **{**second, **changes.get("second", {})}),
    ]


def choose(
    docs: list[ClusterDoc], kind: str, region: str | None = None, zones: list[str] | None = None,
    spec: str = "h100x1", spent: dict[str, int] | None = None,
) -> str:  # fmt: skip
    return choose_cluster(
        docs, kind, WHOLE, region=region, zones=zones or [], spec_name=spec, warm_spent=spent
    )


def test_the_home_cluster_takes_a_kind_it_has_even_with_fewer_free() -> None:
    assert choose(fleet(), H100) == "local-1"


def test_a_kind_only_another_cluster_has_goes_there() -> None:
    assert choose(fleet(), B200) == "local-2"


def test_a_region_asked_for_is_where_it_goes() -> None:
    assert choose(fleet(), H100, region="local-2") == "local-2"


def test_a_zone_only_another_cluster_has_takes_it_there() -> None:
    assert choose(fleet(), H100, zones=["zone-c"]) == "local-2"


def test_of_several_other_clusters_the_one_with_the_most_free_is_chosen() -> None:
    docs = [
        *fleet(second={"gpus": {B200: (16, 5)}}),
        cluster("local-3", "local-2", gpus={B200: (16, 2)}),
        cluster("local-4", "local-2", gpus={B200: (16, 12)}),
    ]
    assert choose(docs, B200) == "local-4"


def test_a_cluster_with_a_warm_unit_of_the_spec_comes_before_the_home_cluster() -> None:
    warm_second = fleet(second={"warm": {"h100x1": 1}})
    assert choose(warm_second, H100) == "local-2"
    # A unit of another spec, or none left, does not count; a region asked still rules.
    assert choose(fleet(second={"warm": {"h100x1": 0}}), H100) == "local-1"
    assert choose(fleet(second={"warm": {"h100x2": 3}}), H100) == "local-1"
    assert choose(warm_second, H100, region="local-1") == "local-1"
    # Once a start went for the one unit the last look found, the next goes home: a
    # burst is not sent after a single unit until the next look.
    assert choose(warm_second, H100, spent={"local-2": 1}) == "local-1"
    assert choose(fleet(second={"warm": {"h100x1": 2}}), H100, spent={"local-2": 1}) == "local-2"
    # A warm cluster that takes no new workloads is passed over.
    assert choose(fleet(second={"warm": {"h100x1": 1}, "state": "cordoned"}), H100) == "local-1"


def test_a_cordoned_or_unanswering_home_cluster_sends_its_kinds_elsewhere() -> None:
    assert choose(fleet(home={"state": "cordoned"}), H100) == "local-2"
    assert choose(fleet(home={"state": "draining"}), H100) == "local-2"


def test_an_unanswering_cluster_takes_nothing_new() -> None:
    with pytest.raises(Conflict) as refused:
        choose(fleet(second={"reachable": False}), B200)
    assert (
        refused.value.detail
        == "no cluster takes new workloads now: cluster 'local-2' is not answering"
    )


def test_no_open_cluster_with_the_kind_is_a_409_saying_why() -> None:
    with pytest.raises(Conflict) as refused:
        choose(fleet(home={"state": "cordoned"}), A100)
    assert (
        refused.value.detail == "no cluster takes new workloads now: cluster 'local-1' is cordoned"
    )


def test_a_region_with_no_cluster_is_a_422_listing_the_regions() -> None:
    with pytest.raises(ValidationFailed) as refused:
        choose(fleet(), H100, region="mars-1")
    assert (
        refused.value.detail == "no cluster is in region 'mars-1'; the regions are local-1, local-2"
    )
    assert refused.value.extensions["regions"] == ["local-1", "local-2"]


def test_a_region_without_the_kind_is_a_422_naming_where_it_is() -> None:
    with pytest.raises(ValidationFailed) as refused:
        choose(fleet(), B200, region="local-1")
    assert (
        refused.value.detail
        == "no cluster in region 'local-1' has NVIDIA-B200 GPUs; region local-2 has them"
    )


def test_a_kind_no_cluster_has_goes_home_where_it_fails_with_the_reason() -> None:
    assert choose(fleet(), "NVIDIA-GB300") == "local-1"


def test_before_any_look_the_home_cluster_takes_every_kind_and_no_other_any() -> None:
    unseen = fleet(home={"looked": False}, second={"looked": False})
    assert choose(unseen, B200) == "local-1"
    assert choose(fleet(second={"looked": False}), B200) == "local-1"


def test_the_admission_pass_counts_each_clusters_gpus_as_pools_of_their_own() -> None:
    home = GpuAccounting(capacity={H100: 32}, free={H100: 4}, held={"acme": {H100: 28}})
    second = GpuAccounting(capacity={H100: 8, B200: 16}, free={H100: 8, B200: 10},
                           held={"acme": {B200: 6}})  # fmt: skip
    merged = across_clusters({"local-1": home, "local-2": second})
    assert merged.capacity == {
        "local-1/NVIDIA-H100": 32,
        "local-2/NVIDIA-H100": 8,
        "local-2/NVIDIA-B200": 16,
    }
    assert merged.free["local-1/NVIDIA-H100"] == 4
    assert merged.held == {"acme": {"local-1/NVIDIA-H100": 28, "local-2/NVIDIA-B200": 6}}


def test_a_workload_that_mounts_volumes_goes_home_where_the_volumes_are() -> None:
    home = home_for_volumes(fleet(), H100, WHOLE, region=None, zones=[])
    assert [doc["_id"] for doc in home] == ["local-1"]


def test_a_workload_with_volumes_asking_for_another_region_or_its_gpus_is_a_422() -> None:
    with pytest.raises(ValidationFailed) as elsewhere:
        home_for_volumes(fleet(), H100, WHOLE, region="local-2", zones=[])
    assert elsewhere.value.detail == (
        "a workload that mounts volume storages runs in region local-1, not 'local-2': "
        "volumes are mounted there alone"
    )
    with pytest.raises(ValidationFailed) as lacking:
        home_for_volumes(fleet(), B200, WHOLE, region=None, zones=[])
    assert "which has no NVIDIA-B200 GPUs" in lacking.value.detail
