"""Local stack: warm `up` time (everything stopped -> every /readyz green) and idle memory.

The cold figure (first provisioning, empty caches) is measured separately; see
docs/local-stack.md. This one runs in about a minute.
"""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys
import time
from pathlib import Path

STACK = [sys.executable, str(Path(__file__).resolve().parents[1] / "deploy" / "local" / "stack.py")]
RUNS = 3
IDLE_SETTLE_S = 20


def _stack(*args: str) -> str:
    return subprocess.run([*STACK, *args], capture_output=True, text=True, check=True).stdout


async def main() -> None:
    timings = []
    for _ in range(RUNS):
        _stack("down")
        started = time.perf_counter()
        _stack("up")
        timings.append(time.perf_counter() - started)
    print(f"warm up, all 14 components healthy: "
          f"median {statistics.median(timings):.1f}s, min {min(timings):.1f}s, max {max(timings):.1f}s "
          f"over {RUNS} runs")  # fmt: skip
    await asyncio.sleep(IDLE_SETTLE_S)
    print(f"idle memory after {IDLE_SETTLE_S}s (resident, MiB):")
    print(_stack("status"))
