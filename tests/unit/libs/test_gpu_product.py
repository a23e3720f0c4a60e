"""One GPU, one type: NVML's name and GPU feature discovery's label meet."""

from __future__ import annotations

import tomllib

from gpucloud_libs.naming import gpu_product
from gpucloud_stack import layout


def test_nvmls_name_is_the_label_specs_use() -> None:
    # As read from the H100 of 2026-11-26 (NVML) and as GFD labels its node.
    assert gpu_product("NVIDIA H100 80GB HBM3") == "NVIDIA-H100-80GB-HBM3"
    assert gpu_product("NVIDIA A100-SXM4-40GB") == "NVIDIA-A100-SXM4-40GB"
    assert gpu_product("  NVIDIA  L40S ") == "NVIDIA-L40S"


def test_every_product_of_the_local_fleet_is_already_a_label() -> None:
    fleet = tomllib.loads((layout.LOCAL_DIR / "fleet.toml").read_text())
    for pool in fleet["pool"]:
        assert gpu_product(pool["gpu_product"]) == pool["gpu_product"]
