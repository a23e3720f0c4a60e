"""Simulated GPU telemetry for nodes without hardware (the kwok fleet).

Seeded and deterministic for a given seed and sequence of calls. Load follows
the instances placed on each node: a GPU running an instance is busy (70-95 %
utilisation, most of its memory, warm, drawing near its power limit); a free
one idles. Faults are injected per GPU:

- `overheat`: 93-97 °C with the hardware thermal slowdown throttle bit set;
- `ecc`: corrected ECC errors climbing by ~60 a second, and one uncorrected;
- `xid79`: "GPU has fallen off the bus": one XID 79, then the GPU reads idle.

A node whose GPUs are shared out (MIG instances, or time-sliced replicas) reports
one sample per slice, as NVML reports each MIG device: attributed to the instance
that holds the slice, with the physical GPU's health readings and its share of the
GPU's memory.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, NamedTuple

from gpucloud_libs.events import GpuInventory, GpuSample
from gpucloud_libs.gpu_shares import MIG_RESOURCE_PREFIX, SHARED_GPU_RESOURCE, GpuShare
from gpucloud_libs.naming import GPU_RESOURCE

#: `idle`: the GPU is held by its instance but does no work (stop-when-idle's case).
Fault = Literal["overheat", "ecc", "xid79", "idle"]
FAULTS: tuple[str, ...] = Fault.__args__  # type: ignore[attr-defined]

#: Memory (MiB) and board power limit (W) by model fragment, the first that matches;
#: others get defaults.
_MODELS = {
    "H200": (143_771, 700.0),
    "H100": (81_559, 700.0),
    "A100-SXM4-40GB": (40_960, 400.0),
    "A100-PCIE-40GB": (40_960, 250.0),
    "A100": (81_920, 400.0),
    "L40S": (46_068, 350.0),
    "L4": (23_034, 72.0),
}
_HW_THERMAL_SLOWDOWN = 0x40


#: A time-sliced replica's kind, where a MIG slice names its profile.
REPLICA = "replica"


class Placement(NamedTuple):
    """An instance on a node, holding `units` of the GPU resource `resource`."""

    tenant_id: str
    instance_id: str
    units: int
    resource: str = GPU_RESOURCE


@dataclass
class SimulatedNode:
    name: str
    model: str
    gpu_count: int
    #: Shared GPUs, one entry per slice: (physical GPU index, MIG profile or REPLICA).
    slices: list[tuple[int, str]] = field(default_factory=list)
    #: GPU index (or slice index, on a shared node) -> (tenant, instance) using it.
    placed: dict[int, tuple[str, str]] = field(default_factory=dict)


def slice_layout(gpu_count: int, shared: dict[str, int]) -> list[tuple[int, str]]:
    """Slices over `gpu_count` GPUs from a node's shared resources (name -> units): MIG
    profiles fill GPUs in turn, as many per GPU as its seven compute slices allow;
    time-sliced replicas are spread evenly."""
    slices: list[tuple[int, str]] = []
    gpu = 0
    for resource, units in sorted(shared.items()):
        if resource.startswith(MIG_RESOURCE_PREFIX):
            profile = resource.removeprefix(MIG_RESOURCE_PREFIX)
            per_gpu = max(1, int(1 / GpuShare.mig(profile).weight))
            for number in range(units):
                slices.append((min(gpu + number // per_gpu, gpu_count - 1), profile))
            gpu += -(-units // per_gpu)
        elif resource == SHARED_GPU_RESOURCE:
            slices += [(number % gpu_count, REPLICA) for number in range(units)]
    return slices


@dataclass
class _GpuState:
    ecc_corrected: int = 0
    ecc_uncorrected: int = 0
    fell_off: bool = False


def model_memory_mib(model: str) -> float:
    """The memory the simulator gives a GPU of `model`."""
    return _spec(model)[0]


def _spec(model: str) -> tuple[float, float]:
    for fragment, spec in _MODELS.items():
        if fragment in model.upper():
            return spec
    return (24_576.0, 300.0)


class SimulatedFleet:
    def __init__(self, seed: int = 7) -> None:
        self._seed = seed
        self.nodes: dict[str, SimulatedNode] = {}
        #: Each node's zone, from its labels (what its inventory says).
        self.zones: dict[str, str | None] = {}
        self._faults: dict[tuple[str, int], Fault] = {}
        self._gpus: dict[tuple[str, int], _GpuState] = {}
        self._random: dict[str, random.Random] = {}

    def set_node(
        self, name: str, model: str, gpu_count: int, slices: list[tuple[int, str]] | None = None
    ) -> None:
        node = self.nodes.get(name)
        slices = slices or []
        if (
            node is None
            or node.model != model
            or node.gpu_count != gpu_count
            or node.slices != slices
        ):
            self.nodes[name] = SimulatedNode(name, model, gpu_count, slices)
            self._random[name] = random.Random(f"{self._seed}:{name}")

    def remove_node(self, name: str) -> None:
        self.nodes.pop(name, None)

    def place(self, name: str, instances: list[Placement]) -> None:
        """The instances on a node, in placement order: whole GPUs go by index, slices to
        the free ones of their kind. An instance keeps the units it was given, as a
        device plugin's pod keeps its GPUs: one leaving moves no other onto its GPU."""
        node = self.nodes[name]
        staying = {(p.tenant_id, p.instance_id) for p in instances}
        node.placed = {unit: owner for unit, owner in node.placed.items() if owner in staying}
        for placement in instances:
            kind = (
                placement.resource.removeprefix(MIG_RESOURCE_PREFIX)
                if placement.resource.startswith(MIG_RESOURCE_PREFIX)
                else REPLICA
                if placement.resource == SHARED_GPU_RESOURCE
                else None
            )
            units = (
                range(node.gpu_count)
                if kind is None
                else [i for i, (_, slice_kind) in enumerate(node.slices) if slice_kind == kind]
            )
            owner = (placement.tenant_id, placement.instance_id)
            held = sum(1 for unit in units if node.placed.get(unit) == owner)
            free = [unit for unit in units if unit not in node.placed][: placement.units - held]
            for unit in free:
                node.placed[unit] = (placement.tenant_id, placement.instance_id)

    def inject(self, node: str, gpu: int, fault: Fault) -> None:
        self._faults[(node, gpu)] = fault

    def clear(self, node: str, gpu: int | None = None) -> None:
        for key in [key for key in self._faults if key[0] == node and gpu in (None, key[1])]:
            del self._faults[key]
            self._gpus.pop(key, None)

    @staticmethod
    def uuid(node: str, gpu: int) -> str:
        return f"GPU-sim-{node}-{gpu}"

    @staticmethod
    def slice_uuid(node: str, number: int, kind: str) -> str:
        return f"{'GPU' if kind == REPLICA else 'MIG'}-sim-{node}-s{number}"

    def inventory(self, name: str) -> list[GpuInventory]:
        node = self.nodes[name]
        memory, _ = _spec(node.model)
        return [
            GpuInventory(
                gpu_uuid=self.uuid(name, index),
                index=index,
                name=node.model,
                serial=_serial(self._seed, name, index),
                memory_total_mib=memory,
                driver_version="sim-570.0",
                cuda_version="12.8",
                pcie_gen_current=5,
                pcie_gen_max=5,
                pcie_width_current=16,
                pcie_width_max=16,
                mig_mode=any(kind != REPLICA for gpu, kind in node.slices if gpu == index),
                nvlink_links_active=18 if "H100" in node.model.upper() else 0,
            )
            for index in range(node.gpu_count)
        ]

    def sample(self, name: str, at: datetime) -> list[GpuSample]:
        node = self.nodes[name]
        if not node.slices:
            return [
                self._sample(node, index, node.placed.get(index), at)
                for index in range(node.gpu_count)
            ]
        # A shared GPU's health readings are the physical GPU's, read once a round; each
        # slice is busy or idle with the instance that holds it.
        samples = []
        holders: dict[int, tuple[str, str] | None] = {}
        for number, (gpu, _) in enumerate(node.slices):
            holders[gpu] = holders.get(gpu) or node.placed.get(number)
        physical = {gpu: self._sample(node, gpu, holder, at) for gpu, holder in holders.items()}
        per_gpu = {gpu: sum(1 for g, _ in node.slices if g == gpu) for gpu in physical}
        rng = self._random[name]
        for number, (gpu, kind) in enumerate(node.slices):
            whole, placed = physical[gpu], node.placed.get(number)
            part = 1 / per_gpu[gpu] if kind == REPLICA else float(GpuShare.mig(kind).weight)
            fault = self._faults.get((name, gpu))
            fell_off = self._gpus[(name, gpu)].fell_off
            busy = placed is not None and not fell_off and fault != "idle"
            util = rng.uniform(70, 95) if busy else rng.uniform(0, 3)
            samples.append(
                whole.model_copy(
                    update={
                        "gpu_uuid": self.slice_uuid(name, number, kind),
                        "parent_gpu_uuid": whole.gpu_uuid,
                        "slice": kind,
                        "utilization_gpu_pct": round(util, 1),
                        "utilization_memory_pct": round(util * 0.6, 1),
                        "memory_total_mib": round(whole.memory_total_mib * part),
                        "memory_used_mib": round(
                            whole.memory_total_mib * part * (0.75 if busy else 0.01)
                        ),
                        "power_w": round(whole.power_w * part, 1),
                        "tenant_id": placed[0] if placed else None,
                        "instance_id": placed[1] if placed else None,
                    }
                )
            )
        return samples

    def _sample(
        self, node: SimulatedNode, index: int, placed: tuple[str, str] | None, at: datetime
    ) -> GpuSample:
        """GPU `index` of `node` as NVML would read it, busy while `placed` uses it."""
        name, rng = node.name, self._random[node.name]
        memory_total, power_limit = _spec(node.model)
        state = self._gpus.setdefault((name, index), _GpuState())
        fault = self._faults.get((name, index))
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
        return GpuSample(
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


def _serial(seed: int, node: str, index: int) -> str:
    """A GPU's serial: the same for the same seed, node and GPU in every process
    (`hash()` of a string changes from one process to the next)."""
    digest = hashlib.sha256(f"{seed}/{node}/{index}".encode()).digest()
    return f"SIM{int.from_bytes(digest[:8], 'big') % 10**12:012d}"
