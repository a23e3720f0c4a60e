"""GPU samples as the agent reports them, for the monitoring unit tests: one GPU at
half load, whatever fields a test changes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from gpucloud_libs.events import GpuSample

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)  # a whole hour


def at(second: float) -> datetime:
    return T0 + timedelta(seconds=second)


def sample(second: float, **fields: Any) -> GpuSample:
    """GPU-1's sample `second` seconds after T0, with `fields` changed."""
    values: dict[str, Any] = {
        "gpu_uuid": "GPU-1", "index": 0, "at": at(second),
        "utilization_gpu_pct": 50.0, "utilization_memory_pct": 30.0, "memory_used_mib": 1000.0,
        "memory_total_mib": 80_000.0, "temperature_c": 50.0, "power_w": 300.0,
    }  # fmt: skip
    values.update(fields)
    return GpuSample(**values)
