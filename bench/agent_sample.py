"""The node agent's sample cost: time per GPU of one sample, simulated and (with --nvml) real.

`python -m bench agent` times the simulated source here. On a machine with a GPU,
`python -m bench.agent_sample --nvml` also times `NvmlSource.sample` and, in the same
run, the reads the sample path used to make (two `nvmlDeviceGetPcieThroughput` calls,
each blocking for its 20 ms window, and `nvmlDeviceGetMigMode`), so the before and
after are measured side by side. It imports only the agent, so it runs on a node
with the agent's own packages.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime

from gpucloud_agent.simulated import SimulatedFleet

#: The last figure measured on a real GPU (docs/monitoring.md has the run).
DEVICE_FIGURE = (
    "H100 80GB HBM3, 2026-11-26: NvmlSource.sample 0.027 ms per GPU at p50 (0.044 ms p99) "
    "idle, 0.040 ms under load, against 42.3 ms for the reads it no longer makes"
)


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench agent", description=__doc__)
    parser.add_argument("--samples", type=int, default=300, help="samples timed per source")
    parser.add_argument("--nvml", action="store_true", help="also time the real NVML source")
    return parser


def _percentiles(per_gpu_ms: list[float]) -> tuple[float, float]:
    ordered = sorted(per_gpu_ms)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return statistics.median(ordered), p99


def _time(samples: int, gpus: int, sample: Callable[[], object]) -> tuple[float, float]:
    sample()  # warm: first readings, caches
    per_gpu: list[float] = []
    for _ in range(samples):
        started = time.perf_counter()
        sample()
        per_gpu.append((time.perf_counter() - started) * 1000 / gpus)
    return _percentiles(per_gpu)


def _row(name: str, gpus: int, figures: tuple[float, float]) -> None:
    print(f"| {name} | {gpus} | {figures[0]:.3f} ms | {figures[1]:.3f} ms |", flush=True)


def _nvml(samples: int) -> None:
    import pynvml  # only here: the simulated run needs no driver library

    from gpucloud_agent.nvml import NvmlSource  # it imports pynvml

    source = NvmlSource()
    source.open()
    try:
        gpus = len(source.inventory())
        _row(
            "NvmlSource.sample (PCIe from byte counters)", gpus, _time(samples, gpus, source.sample)
        )
        handles = [pynvml.nvmlDeviceGetHandleByIndex(index) for index in range(gpus)]

        def former_extra_reads() -> None:
            for handle in handles:
                for counter in (pynvml.NVML_PCIE_UTIL_TX_BYTES, pynvml.NVML_PCIE_UTIL_RX_BYTES):
                    pynvml.nvmlDeviceGetPcieThroughput(handle, counter)
                pynvml.nvmlDeviceGetMigMode(handle)

        # Fewer rounds: each costs ~42 ms per GPU.
        extra = _time(max(10, samples // 10), gpus, former_extra_reads)
        _row("reads the sample path no longer makes (PcieThroughput x2, MigMode)", gpus, extra)
    finally:
        source.close()


async def main(args: argparse.Namespace) -> None:
    fleet = SimulatedFleet()
    fleet.set_node("bench-node", "NVIDIA-H100-80GB-HBM3", 8)
    at = datetime.now(UTC)
    print("| source | GPUs | per GPU, p50 | per GPU, p99 |\n| --- | --- | --- | --- |")
    _row(
        "simulated (SimulatedFleet.sample)",
        8,
        _time(args.samples, 8, lambda: fleet.sample("bench-node", at)),
    )
    if args.nvml:
        _nvml(args.samples)
    else:
        print(f"real GPU: {DEVICE_FIGURE}")


if __name__ == "__main__":
    import asyncio

    asyncio.run(main(parser().parse_args()))
