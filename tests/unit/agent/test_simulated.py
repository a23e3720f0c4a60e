"""The simulated GPUs stand in for real ones: their memory is the product's."""

from __future__ import annotations

import tomllib

from gpucloud_agent.simulated import model_memory_mib
from gpucloud_stack import layout


def test_each_fleet_pool_is_simulated_with_its_products_memory() -> None:
    fleet = tomllib.loads((layout.LOCAL_DIR / "fleet.toml").read_text())
    for pool in fleet["pool"]:
        assert model_memory_mib(pool["gpu_product"]) == pool["gpu_memory_mib"], pool["name"]
    assert model_memory_mib("NVIDIA-A100-SXM4-80GB") == 81_920
