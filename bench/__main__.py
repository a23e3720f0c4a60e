"""Run every benchmark, or the ones named: `python -m bench [stack ...]`."""

from __future__ import annotations

import asyncio
import sys

from . import stack_startup

BENCHMARKS = {"stack": stack_startup.main}


def main() -> None:
    names = sys.argv[1:] or list(BENCHMARKS)
    unknown = [name for name in names if name not in BENCHMARKS]
    if unknown:
        sys.exit(f"unknown benchmark(s): {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}")
    for name in names:
        print(f"\n=== {name} ===", flush=True)
        asyncio.run(BENCHMARKS[name]())


main()
