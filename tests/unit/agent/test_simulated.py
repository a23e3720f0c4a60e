"""The simulated GPUs stand in for real ones: their memory is the product's, and an
instance keeps its GPUs as a device plugin's pod does."""

from __future__ import annotations

import tomllib

from gpucloud_agent.simulated import Placement, SimulatedFleet, model_memory_mib
from gpucloud_stack import layout


def test_each_fleet_pool_is_simulated_with_its_products_memory() -> None:
    fleet = tomllib.loads((layout.LOCAL_DIR / "fleet.toml").read_text())
    for pool in fleet["pool"]:
        assert model_memory_mib(pool["gpu_product"]) == pool["gpu_memory_mib"], pool["name"]
    assert model_memory_mib("NVIDIA-A100-SXM4-80GB") == 81_920


def test_an_instance_keeps_its_gpus_when_another_leaves() -> None:
    """As a device plugin's pod keeps its GPUs: the first instance leaving moves the
    second onto none of its GPUs (a fault on a freed GPU stays with that GPU)."""
    fleet = SimulatedFleet(seed=1)
    fleet.set_node("n1", "NVIDIA-H100", 4)
    first, second = Placement("t", "i-1", 1), Placement("t", "i-2", 2)
    fleet.place("n1", [first, second])
    assert fleet.nodes["n1"].placed == {0: ("t", "i-1"), 1: ("t", "i-2"), 2: ("t", "i-2")}
    fleet.place("n1", [second])
    assert fleet.nodes["n1"].placed == {1: ("t", "i-2"), 2: ("t", "i-2")}
    fleet.place("n1", [second, Placement("t", "i-3", 2)])
    assert fleet.nodes["n1"].placed == {
        0: ("t", "i-3"), 1: ("t", "i-2"), 2: ("t", "i-2"), 3: ("t", "i-3"),
    }  # fmt: skip
