"""Run every benchmark, or the ones named: `python -m bench [stack ...]`."""

from __future__ import annotations

import asyncio
import sys

from . import (
    gateway_overhead,
    instance_start,
    metering_throughput,
    monitoring_ingest,
    stack_startup,
    storage_transfer,
)

BENCHMARKS = {
    "stack": stack_startup.main,
    "instances": instance_start.main,
    "gateway": gateway_overhead.main,
    "metering": metering_throughput.main,
    "storage": storage_transfer.main,
    "monitoring": monitoring_ingest.main,
}


def main() -> None:
    names = [arg for arg in sys.argv[1:2] if not arg.startswith("-")] or list(BENCHMARKS)
    unknown = [name for name in names if name not in BENCHMARKS]
    if unknown:
        sys.exit(f"unknown benchmark(s): {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}")
    for name in names:
        print(f"\n=== {name} ===", flush=True)
        asyncio.run(BENCHMARKS[name]())


main()
