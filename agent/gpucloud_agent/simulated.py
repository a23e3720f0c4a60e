"""Simulated GPU telemetry for nodes without hardware (the kwok fleet).

Seeded and deterministic for a given seed and sequence of calls. Load follows
the instances placed on each node: a GPU running an instance is busy (70-95 %
utilisation, most of its memory, warm, drawing near its power limit); a free
one idles. Faults are injected per GPU:

- `overheat`: 93-97 °C with the hardware thermal slowdown throttle bit set;
- `ecc`: corrected ECC errors climbing by ~60 a second, and one uncorrected;
- `xid79`: "GPU has fallen off the bus": one XID 79, then the GPU reads idle.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from gpucloud_libs.events import GpuInventory, GpuSample

#: `idle`: the GPU is held by its instance but does no work (stop-when-idle's case).
Fault = Literal["overheat", "ecc", "xid79", "idle"]
FAULTS: tuple[str, ...] = Fault.__args__  # type: ignore[attr-defined]

#: Memory (MiB) and board power limit (W) by model fragment; others get defaults.
_MODELS = {
    "H200": (143_771, 700.0),
    "H100": (81_559, 700.0),
    "A100": (81_920, 400.0),
    "L40S": (46_068, 350.0),
    "L4": (23_034, 72.0),
}
_HW_THERMAL_SLOWDOWN = 0x40


@dataclass
class SimulatedNode:
    name: str
    model: str
    gpu_count: int
    #: GPU index -> (tenant, instance) of the instance using it.
    placed: dict[int, tuple[str, str]] = field(default_factory=dict)


@dataclass
class _GpuState:
    ecc_corrected: int = 0
    ecc_uncorrected: int = 0
    fell_off: bool = False


def _spec(model: str) -> tuple[float, float]:
    for fragment, spec in _MODELS.items():
        if fragment in model.upper():
            return spec
    return (24_576.0, 300.0)


class SimulatedFleet:
    def __init__(self, seed: int = 7) -> None:
        self._seed = seed
        self.nodes: dict[str, SimulatedNode] = {}
        self._faults: dict[tuple[str, int], Fault] = {}
        self._gpus: dict[tuple[str, int], _GpuState] = {}
        self._random: dict[str, random.Random] = {}

    def set_node(self, name: str, model: str, gpu_count: int) -> None:
        node = self.nodes.get(name)
        if node is None or node.model != model or node.gpu_count != gpu_count:
            self.nodes[name] = SimulatedNode(name, model, gpu_count)
            self._random[name] = random.Random(f"{self._seed}:{name}")

    def remove_node(self, name: str) -> None:
        self.nodes.pop(name, None)

    def place(self, name: str, instances: list[tuple[str, str, int]]) -> None:
        """The instances on a node, in placement order, as (tenant, instance, gpus)."""
        node = self.nodes[name]
        node.placed = {}
        index = 0
        for tenant_id, instance_id, gpus in instances:
            for _ in range(gpus):
                if index < node.gpu_count:
                    node.placed[index] = (tenant_id, instance_id)
                    index += 1

    def inject(self, node: str, gpu: int, fault: Fault) -> None:
        self._faults[(node, gpu)] = fault

    def clear(self, node: str, gpu: int | None = None) -> None:
        for key in [key for key in self._faults if key[0] == node and gpu in (None, key[1])]:
            del self._faults[key]
            self._gpus.pop(key, None)

    @staticmethod
    def uuid(node: str, gpu: int) -> str:
        return f"GPU-sim-{node}-{gpu}"

    def inventory(self, name: str) -> list[GpuInventory]:
        node = self.nodes[name]
        memory, _ = _spec(node.model)
        return [
            GpuInventory(
                gpu_uuid=self.uuid(name, index),
                index=index,
                name=node.model,
                serial=f"SIM{abs(hash((self._seed, name, index))) % 10**12:012d}",
                memory_total_mib=memory,
                driver_version="sim-570.0",
                cuda_version="12.8",
                pcie_gen_current=5,
                pcie_gen_max=5,
                pcie_width_current=16,
                pcie_width_max=16,
                mig_mode=False,
                nvlink_links_active=18 if "H100" in node.model.upper() else 0,
            )
            for index in range(node.gpu_count)
        ]

    def sample(self, name: str, at: datetime) -> list[GpuSample]:
        node, rng = self.nodes[name], self._random[name]
        memory_total, power_limit = _spec(node.model)
        samples = []
        for index in range(node.gpu_count):
            state = self._gpus.setdefault((name, index), _GpuState())
            fault = self._faults.get((name, index))
            placed = node.placed.get(index)
            busy = placed is not None and not state.fell_off and fault != "idle"
            util = rng.uniform(70, 95) if busy else rng.uniform(0, 3)
            temperature = 34 + 0.45 * util + rng.uniform(-1.5, 1.5)
            throttle = 0
            xids: tuple[int, ...] = ()
            if fault == "overheat":
                temperature, throttle = rng.uniform(93, 97), _HW_THERMAL_SLOWDOWN
            elif fault == "ecc":
                state.ecc_corrected += rng.randint(40, 80)
                state.ecc_uncorrected = max(state.ecc_uncorrected, 1)
            elif fault == "xid79" and not state.fell_off:
                state.fell_off, xids = True, (79,)
            if state.fell_off:
                util = 0.0
            samples.append(
                GpuSample(
                    gpu_uuid=self.uuid(name, index),
                    index=index,
                    at=at,
                    utilization_gpu_pct=round(util, 1),
                    utilization_memory_pct=round(util * 0.6, 1),
                    memory_used_mib=round(memory_total * (rng.uniform(0.6, 0.9) if busy else 0.01)),
                    memory_total_mib=memory_total,
                    temperature_c=round(temperature, 1),
                    power_w=round(power_limit * (0.12 + 0.85 * util / 100), 1),
                    sm_clock_mhz=1980.0 if busy else 345.0,
                    memory_clock_mhz=2619.0,
                    throttle_reasons=throttle,
                    ecc_corrected=state.ecc_corrected,
                    ecc_uncorrected=state.ecc_uncorrected,
                    pcie_tx_kibps=round(rng.uniform(1e5, 9e5) if busy else 10.0, 1),
                    pcie_rx_kibps=round(rng.uniform(1e5, 9e5) if busy else 10.0, 1),
                    xid_errors=xids,
                    tenant_id=placed[0] if placed else None,
                    instance_id=placed[1] if placed else None,
                )
            )
        return samples
