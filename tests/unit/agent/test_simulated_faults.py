"""The simulated fleet as monitoring sees it: busy GPUs under their instances and idle
ones free, each injected fault reading as the broken GPU it stands for until cleared,
shared GPUs reported slice by slice, and nodes that change or go (simulated.py).
The memory per product and whole-GPU placement are in test_simulated.py."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime

import pytest

from gpucloud_agent.simulated import (
    REPLICA,
    Fault,
    Placement,
    SimulatedFleet,
    model_memory_mib,
    slice_layout,
)
from gpucloud_libs.events import GpuSample
from gpucloud_libs.gpu_shares import MIG_RESOURCE_PREFIX, SHARED_GPU_RESOURCE

AT = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
H100 = "NVIDIA-H100-80GB-HBM3"
MIG_1G = MIG_RESOURCE_PREFIX + "1g.10gb"
MIG_3G = MIG_RESOURCE_PREFIX + "3g.40gb"
HW_THERMAL_SLOWDOWN = 0x40


def fleet(gpus: int = 2, *, placed: int = 0, seed: int = 1) -> SimulatedFleet:
    """One H100 node `n`, its first `placed` GPUs held by instance i-1 of tenant t."""
    made = SimulatedFleet(seed=seed)
    made.set_node("n", H100, gpus)
    if placed:
        made.place("n", [Placement("t", "i-1", placed)])
    return made


def gpu(made: SimulatedFleet, index: int, node: str = "n") -> GpuSample:
    return made.sample(node, AT)[index]


# --- load ------------------------------------------------------------------------------


def test_a_placed_gpu_is_busy_and_attributed_and_a_free_one_idles() -> None:
    busy, idle = fleet(placed=1).sample("n", AT)
    assert 70 <= busy.utilization_gpu_pct <= 95
    assert (busy.tenant_id, busy.instance_id, busy.sm_clock_mhz) == ("t", "i-1", 1980.0)
    assert busy.memory_used_mib >= 0.6 * 81_559 - 1
    assert 0 <= idle.utilization_gpu_pct <= 3
    assert (idle.tenant_id, idle.instance_id, idle.sm_clock_mhz) == (None, None, 345.0)
    assert idle.memory_used_mib == round(81_559 * 0.01)
    assert busy.power_w > idle.power_w


def test_the_same_seed_and_calls_give_the_same_readings() -> None:
    first, second = fleet(placed=1, seed=5), fleet(placed=1, seed=5)
    for _ in range(3):
        assert first.sample("n", AT) == second.sample("n", AT)
    assert fleet(placed=1, seed=6).sample("n", AT) != fleet(placed=1, seed=5).sample("n", AT)


def test_a_gpu_is_named_by_its_node_and_index() -> None:
    assert [sample.gpu_uuid for sample in fleet(3).sample("n", AT)] == [
        "GPU-sim-n-0", "GPU-sim-n-1", "GPU-sim-n-2",
    ]  # fmt: skip
    assert SimulatedFleet.slice_uuid("n", 4, "1g.10gb") == "MIG-sim-n-s4"
    assert SimulatedFleet.slice_uuid("n", 4, REPLICA) == "GPU-sim-n-s4"


# --- faults ----------------------------------------------------------------------------


def test_an_overheating_gpu_runs_hot_with_the_thermal_slowdown_bit() -> None:
    made = fleet()
    made.inject("n", 1, "overheat")
    hot, cool = made.sample("n", AT)[1], made.sample("n", AT)[0]
    assert 93 <= hot.temperature_c <= 97
    assert hot.throttle_reasons == HW_THERMAL_SLOWDOWN
    assert cool.throttle_reasons == 0
    assert cool.temperature_c < 40


def test_ecc_errors_climb_each_sample_with_one_uncorrected() -> None:
    made = fleet()
    made.inject("n", 0, "ecc")
    readings = [gpu(made, 0) for _ in range(3)]
    corrected = [sample.ecc_corrected for sample in readings]
    steps = [later - earlier for earlier, later in zip([0, *corrected], corrected, strict=False)]
    assert all(40 <= step <= 80 for step in steps)
    assert [sample.ecc_uncorrected for sample in readings] == [1, 1, 1]
    assert (gpu(made, 1).ecc_corrected, gpu(made, 1).ecc_uncorrected) == (0, 0)


def test_a_gpu_fallen_off_the_bus_reports_xid_79_once_then_reads_idle() -> None:
    made = fleet(placed=1)
    made.inject("n", 0, "xid79")
    first, second = gpu(made, 0), gpu(made, 0)
    assert (first.xid_errors, first.utilization_gpu_pct) == ((79,), 0.0)
    assert second.xid_errors == ()
    assert (second.utilization_gpu_pct, second.sm_clock_mhz) == (0.0, 345.0)
    assert second.instance_id == "i-1"  # still held by its instance, doing nothing


def test_an_idle_fault_leaves_the_gpu_held_but_doing_nothing() -> None:
    made = fleet(placed=1)
    made.inject("n", 0, "idle")
    held = gpu(made, 0)
    assert held.utilization_gpu_pct <= 3
    assert (held.tenant_id, held.instance_id) == ("t", "i-1")


def test_clearing_one_gpu_resets_it_and_leaves_the_others_faults() -> None:
    made = fleet(placed=2)
    made.inject("n", 0, "ecc")
    made.inject("n", 1, "overheat")
    gpu(made, 0)
    made.clear("n", 0)
    healed, still_hot = made.sample("n", AT)
    assert (healed.ecc_corrected, healed.ecc_uncorrected) == (0, 0)
    assert still_hot.throttle_reasons == HW_THERMAL_SLOWDOWN


def test_clearing_a_node_brings_a_fallen_gpu_back() -> None:
    made = fleet(placed=1)
    made.inject("n", 0, "xid79")
    gpu(made, 0)
    made.clear("n")
    assert gpu(made, 0).utilization_gpu_pct >= 70


def test_a_fault_on_one_node_leaves_another_nodes_gpu_of_that_index_alone() -> None:
    made = fleet()
    made.set_node("m", H100, 2)
    made.inject("n", 0, "overheat")
    assert gpu(made, 0, "m").throttle_reasons == 0
    made.clear("m")  # clears nothing of n
    assert gpu(made, 0, "n").throttle_reasons == HW_THERMAL_SLOWDOWN


# --- nodes and inventory ---------------------------------------------------------------


def test_setting_a_node_again_unchanged_keeps_its_instances() -> None:
    made = fleet(placed=1)
    made.set_node("n", H100, 2)
    assert made.nodes["n"].placed == {0: ("t", "i-1")}


def test_a_node_that_changes_starts_afresh() -> None:
    made = fleet(placed=1)
    made.set_node("n", H100, 4)
    assert (made.nodes["n"].gpu_count, made.nodes["n"].placed) == (4, {})
    made.remove_node("n")
    made.remove_node("n")  # gone already: nothing to do
    assert made.nodes == {}


def test_an_inventory_describes_each_gpu_of_the_node() -> None:
    inventory = fleet(2).inventory("n")
    assert [(g.gpu_uuid, g.index, g.name) for g in inventory] == [
        ("GPU-sim-n-0", 0, H100), ("GPU-sim-n-1", 1, H100),
    ]  # fmt: skip
    first = inventory[0]
    assert (first.memory_total_mib, first.nvlink_links_active, first.mig_mode) == (
        81_559, 18, False,
    )  # fmt: skip
    assert (first.serial or "").startswith("SIM")
    assert first.serial != inventory[1].serial


def test_a_gpu_other_than_an_h100_has_no_nvlink_and_an_unknown_one_default_memory() -> None:
    made = SimulatedFleet()
    made.set_node("l4", "NVIDIA-L4", 1)
    assert made.inventory("l4")[0].nvlink_links_active == 0
    assert model_memory_mib("NVIDIA-A100-SXM4-40GB") == 40_960  # before the 80 GB A100
    assert model_memory_mib("Tesla-T4") == 24_576


# --- shared GPUs -----------------------------------------------------------------------


def test_mig_slices_fill_gpus_in_turn_seven_compute_slices_each() -> None:
    assert slice_layout(2, {MIG_1G: 9}) == [(0, "1g.10gb")] * 7 + [(1, "1g.10gb")] * 2
    # Profiles in name order, the next profile on the next GPU.
    assert slice_layout(2, {MIG_3G: 2, MIG_1G: 3}) == [(0, "1g.10gb")] * 3 + [(1, "3g.40gb")] * 2


def test_more_mig_slices_than_the_gpus_hold_stay_on_the_last_gpu() -> None:
    assert slice_layout(1, {MIG_3G: 3}) == [(0, "3g.40gb")] * 3


def test_time_sliced_replicas_spread_evenly_over_the_gpus() -> None:
    assert slice_layout(2, {SHARED_GPU_RESOURCE: 5}) == [
        (0, REPLICA), (1, REPLICA), (0, REPLICA), (1, REPLICA), (0, REPLICA),
    ]  # fmt: skip
    assert slice_layout(2, {"nvidia.com/gpu": 2}) == []  # whole GPUs are no slices


def test_an_instance_on_mig_slices_takes_free_slices_of_its_profile() -> None:
    made = SimulatedFleet()
    made.set_node("m", "NVIDIA-A100-SXM4-80GB", 2, slice_layout(2, {MIG_3G: 2, MIG_1G: 3}))
    made.place("m", [Placement("t", "a", 2, MIG_1G), Placement("t", "b", 1, MIG_3G)])
    assert made.nodes["m"].placed == {0: ("t", "a"), 1: ("t", "a"), 3: ("t", "b")}


def test_a_mig_node_reports_a_sample_per_slice_with_its_share_of_memory() -> None:
    made = SimulatedFleet(seed=3)
    made.set_node("m", "NVIDIA-A100-SXM4-80GB", 1, slice_layout(1, {MIG_1G: 7}))
    made.place("m", [Placement("t", "i", 2, MIG_1G)])
    samples = made.sample("m", AT)
    assert [s.gpu_uuid for s in samples] == [f"MIG-sim-m-s{n}" for n in range(7)]
    assert {s.parent_gpu_uuid for s in samples} == {"GPU-sim-m-0"}
    assert {s.slice for s in samples} == {"1g.10gb"}
    assert {s.memory_total_mib for s in samples} == {round(81_920 / 7)}
    assert [s.instance_id for s in samples] == ["i", "i", None, None, None, None, None]
    assert all(s.utilization_gpu_pct >= 70 for s in samples[:2])
    assert all(s.utilization_gpu_pct <= 3 for s in samples[2:])
    assert made.inventory("m")[0].mig_mode is True


def test_a_replica_node_splits_each_gpus_memory_among_its_replicas() -> None:
    made = SimulatedFleet()
    made.set_node("r", "NVIDIA-L4", 2, slice_layout(2, {SHARED_GPU_RESOURCE: 4}))
    made.place("r", [Placement("t", "a", 1, SHARED_GPU_RESOURCE)])
    samples = made.sample("r", AT)
    assert [(s.gpu_uuid, s.parent_gpu_uuid, s.slice) for s in samples] == [
        ("GPU-sim-r-s0", "GPU-sim-r-0", REPLICA), ("GPU-sim-r-s1", "GPU-sim-r-1", REPLICA),
        ("GPU-sim-r-s2", "GPU-sim-r-0", REPLICA), ("GPU-sim-r-s3", "GPU-sim-r-1", REPLICA),
    ]  # fmt: skip
    assert {s.memory_total_mib for s in samples} == {round(23_034 / 2)}
    assert made.inventory("r")[0].mig_mode is False


def test_a_fault_on_a_shared_gpu_shows_on_every_slice_of_it() -> None:
    made = SimulatedFleet()
    made.set_node("r", H100, 2, slice_layout(2, {SHARED_GPU_RESOURCE: 4}))
    made.inject("r", 1, "overheat")
    throttled = [s.throttle_reasons for s in made.sample("r", AT)]
    assert throttled == [0, HW_THERMAL_SLOWDOWN, 0, HW_THERMAL_SLOWDOWN]


@pytest.mark.parametrize("fault", ["xid79", "idle"])
def test_a_held_slice_of_a_gpu_that_does_no_work_reads_idle(fault: Fault) -> None:
    made = SimulatedFleet()
    made.set_node("r", H100, 1, slice_layout(1, {SHARED_GPU_RESOURCE: 2}))
    made.place("r", [Placement("t", "a", 1, SHARED_GPU_RESOURCE)])
    made.inject("r", 0, fault)
    made.sample("r", AT)
    held = made.sample("r", AT)[0]
    assert (held.instance_id, held.utilization_gpu_pct <= 3) == ("a", True)


def test_a_simulated_serial_is_the_same_in_every_process() -> None:
    """Seeded and deterministic: the serial is computed again in a fresh interpreter,
    whose string hashing differs from this one's."""
    fleet = SimulatedFleet(seed=3)
    fleet.set_node("n1", "NVIDIA-H100-80GB-HBM3", 2)
    here = [gpu.serial for gpu in fleet.inventory("n1")]
    code = (
        "from gpucloud_agent.simulated import SimulatedFleet; f = SimulatedFleet(seed=3); "
        "f.set_node('n1', 'NVIDIA-H100-80GB-HBM3', 2); "
        "print(' '.join(g.serial or '' for g in f.inventory('n1')))"
    )
    there = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert here == there
    assert len(set(here)) == 2
