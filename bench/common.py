"""What every benchmark needs: the stack's command line and settings, core pinning,
and percentiles."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

STACK = [sys.executable, str(Path(__file__).resolve().parents[1] / "deploy" / "local" / "stack.py")]
#: Pins a child process to a core, so "per core" figures mean one core.
TASKSET = shutil.which("taskset") or "/usr/bin/taskset"


def stack(*args: str) -> str:
    return subprocess.run([*STACK, *args], capture_output=True, text=True, check=True).stdout


def stack_env() -> dict[str, str]:
    """The running stack's GPUCLOUD_* settings (`stack env --json`)."""
    env: dict[str, str] = json.loads(stack("env", "--json"))
    return env


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(pct / 100 * len(ordered)) - 1))
    return ordered[index]
