"""Roll-ups of GPU samples into fixed windows (a minute, an hour). Pure.

Samples are never stored one by one (8,000 GPUs at 1 Hz would be 8,000 writes
a second); each GPU's window is kept in memory and written once when it
closes. A window is also split by who used the GPU, so a tenant's series holds
only the minutes its own instance ran there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from gpucloud_libs.events import GpuSample

from .documents import RollupDoc

#: Sample fields averaged and maximised in a window.
SERIES = (
    "utilization_gpu_pct",
    "utilization_memory_pct",
    "memory_used_mib",
    "temperature_c",
    "power_w",
)


def window_start(at: datetime, width_s: int) -> datetime:
    epoch = int(at.timestamp())
    return datetime.fromtimestamp(epoch - epoch % width_s, UTC)


@dataclass
class _Window:
    start: datetime
    node: str
    tenant_id: str | None
    instance_id: str | None
    samples: int = 0
    sums: dict[str, float] = field(default_factory=lambda: dict.fromkeys(SERIES, 0.0))
    maxima: dict[str, float] = field(default_factory=lambda: dict.fromkeys(SERIES, 0.0))
    memory_total_mib: float = 0.0
    ecc_corrected: int = 0
    ecc_uncorrected: int = 0
    xids: list[int] = field(default_factory=list)
    #: The physical GPU, for a slice of a shared one (a MIG device).
    parent_gpu_uuid: str | None = None

    def add(self, sample: GpuSample) -> None:
        self.samples += 1
        self.parent_gpu_uuid = sample.parent_gpu_uuid
        for name in SERIES:
            value = float(getattr(sample, name))
            self.sums[name] += value
            self.maxima[name] = max(self.maxima[name], value)
        self.memory_total_mib = sample.memory_total_mib
        self.ecc_corrected = max(self.ecc_corrected, sample.ecc_corrected)
        self.ecc_uncorrected = max(self.ecc_uncorrected, sample.ecc_uncorrected)
        self.xids.extend(sample.xid_errors)

    def _average(self, name: str) -> float:
        return round(self.sums[name] / self.samples, 3)

    def document(self, gpu_uuid: str, width_s: int) -> RollupDoc:
        owner = f"{self.tenant_id or '-'}/{self.instance_id or '-'}"
        return {
            "_id": f"{gpu_uuid}@{int(self.start.timestamp())}#{owner}",
            "gpu_uuid": gpu_uuid,
            "parent_gpu_uuid": self.parent_gpu_uuid,
            "node": self.node,
            "tenant_id": self.tenant_id,
            "instance_id": self.instance_id,
            "start": self.start,
            "width_s": width_s,
            "samples": self.samples,
            "memory_total_mib": self.memory_total_mib,
            "ecc_corrected": self.ecc_corrected,
            "ecc_uncorrected": self.ecc_uncorrected,
            "xids": self.xids,
            "utilization_gpu_pct_avg": self._average("utilization_gpu_pct"),
            "utilization_gpu_pct_max": self.maxima["utilization_gpu_pct"],
            "utilization_memory_pct_avg": self._average("utilization_memory_pct"),
            "utilization_memory_pct_max": self.maxima["utilization_memory_pct"],
            "memory_used_mib_avg": self._average("memory_used_mib"),
            "memory_used_mib_max": self.maxima["memory_used_mib"],
            "temperature_c_avg": self._average("temperature_c"),
            "temperature_c_max": self.maxima["temperature_c"],
            "power_w_avg": self._average("power_w"),
            "power_w_max": self.maxima["power_w"],
        }


Owner = tuple[str | None, str | None]  # (tenant, instance)


#: How long after a window ends a sample of it may still arrive and count.
LATE_S = 60


class Rollup:
    """Open windows per GPU and user; `add` returns the documents of windows it closed."""

    def __init__(self, width_s: int) -> None:
        self.width_s = width_s
        self._open: dict[str, dict[Owner, _Window]] = {}
        #: Each GPU's latest window written: a sample of it or older comes too late.
        self._written: dict[str, datetime] = {}

    def add(self, node: str, sample: GpuSample) -> list[RollupDoc]:
        start = window_start(sample.at, self.width_s)
        written = self._written.get(sample.gpu_uuid)
        if written is not None and start <= written:
            return []  # a late sample of a window already written: dropped
        windows = self._open.setdefault(sample.gpu_uuid, {})
        closed = []
        # A new window for this GPU closes its older ones, whoever used the GPU then.
        for owner in [owner for owner, window in windows.items() if window.start < start]:
            closed.append(self._close(sample.gpu_uuid, windows.pop(owner)))
        owner = (sample.tenant_id, sample.instance_id)
        if any(other.start > start for other in windows.values()):
            return closed  # a late sample of a window still open: dropped
        window = windows.get(owner)
        if window is None:
            window = windows[owner] = _Window(start, node, *owner)
        window.add(sample)
        return closed

    def flush_before(self, now: datetime) -> list[RollupDoc]:
        """Close the windows of GPUs that went quiet, a minute after they ended: not the
        moment they end, since a sample stamped inside one may still be on its way."""
        cutoff = now - timedelta(seconds=self.width_s + LATE_S)
        closed = []
        for gpu_uuid, windows in list(self._open.items()):
            for owner in [owner for owner, window in windows.items() if window.start <= cutoff]:
                closed.append(self._close(gpu_uuid, windows.pop(owner)))
            if not windows:
                del self._open[gpu_uuid]
        return closed

    def _close(self, gpu_uuid: str, window: _Window) -> RollupDoc:
        self._written[gpu_uuid] = max(window.start, self._written.get(gpu_uuid, window.start))
        return window.document(gpu_uuid, self.width_s)
