"""Local stack: warm `up` time (everything stopped -> every /readyz green) and idle memory.

The cold figure (first provisioning, empty caches) is measured separately; see
docs/local-stack.md. This one runs in about a minute.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from .common import stack

RUNS = 3
IDLE_SETTLE_S = 20


def parser() -> argparse.ArgumentParser:
    return argparse.ArgumentParser(prog="python -m bench stack", description=__doc__)


async def main(_args: argparse.Namespace) -> None:
    timings = []
    for _ in range(RUNS):
        stack("down")
        started = time.perf_counter()
        stack("up")
        timings.append(time.perf_counter() - started)
    print(f"warm up, all 14 components healthy: "
          f"median {statistics.median(timings):.1f}s, min {min(timings):.1f}s, max {max(timings):.1f}s "
          f"over {RUNS} runs")  # fmt: skip
    await asyncio.sleep(IDLE_SETTLE_S)
    print(f"idle memory after {IDLE_SETTLE_S}s (resident, MiB):")
    print(stack("status"))
