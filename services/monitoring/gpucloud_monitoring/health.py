"""Node health: healthy → degraded → quarantined, with reasons. Pure: fed samples,
it returns the transitions, and the service persists and publishes them.

- **Quarantined** on a fault that makes a GPU untrustworthy for a tenant's job:
  an XID that means lost or corrupted state (79: fallen off the bus, 48: double
  bit ECC, 63/64: row remapping failed, 74: NVLink, 94/95: ECC contained or not,
  119/120: GSP), a rise in uncorrected ECC errors, or a temperature at the
  shutdown threshold. It stays quarantined until an operator releases it:
  these faults need a reset or a reboot, and a node that merely looks fine
  again is not proven fine.
- **Degraded** while a GPU runs hot (at or above `hot_c` for `hot_for_s`),
  corrected ECC errors climb fast, or hardware slowdown throttles it. It goes
  back to healthy after `clear_after_s` without any such sign.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from gpucloud_libs.events import GpuSample

QUARANTINE_XIDS = frozenset({48, 63, 64, 74, 79, 94, 95, 119, 120})
#: NVML clocks-throttle reasons that mean the hardware is protecting itself
#: (HW slowdown, HW thermal, HW power brake), not the driver saving power.
HW_SLOWDOWN_MASK = 0x8 | 0x40 | 0x80
ORDER = {"healthy": 0, "degraded": 1, "quarantined": 2}


@dataclass(frozen=True)
class HealthPolicy:
    hot_c: float = 85.0
    hot_for_s: float = 30.0
    shutdown_c: float = 95.0
    #: Corrected ECC errors per GPU in one minute that count as climbing fast.
    corrected_per_minute: int = 100
    clear_after_s: float = 60.0


@dataclass(frozen=True)
class HealthChange:
    node: str
    health: str
    previous: str
    reasons: tuple[str, ...]
    at: datetime


@dataclass
class _GpuWatch:
    hot_since: datetime | None = None
    ecc_uncorrected: int | None = None
    corrected_marks: list[tuple[datetime, int]] = field(default_factory=list)


@dataclass
class NodeState:
    health: str = "healthy"
    reasons: tuple[str, ...] = ()
    last_sign: datetime | None = None
    gpus: dict[str, _GpuWatch] = field(default_factory=dict)


class HealthTracker:
    def __init__(self, policy: HealthPolicy | None = None) -> None:
        self.policy = policy or HealthPolicy()
        self.nodes: dict[str, NodeState] = {}

    def restore(self, node: str, health: str, reasons: tuple[str, ...]) -> None:
        self.nodes[node] = NodeState(health=health, reasons=reasons)

    def release(self, node: str, at: datetime) -> HealthChange | None:
        """An operator cleared the node: back to healthy, signs forgotten."""
        state = self.nodes.setdefault(node, NodeState())
        if state.health == "healthy":
            return None
        previous = state.health
        self.nodes[node] = NodeState()
        return HealthChange(node, "healthy", previous, ("released by an operator",), at)

    def quarantine(self, node: str, reason: str, at: datetime) -> HealthChange | None:
        """An operator took the node out of service: quarantined until released."""
        state = self.nodes.setdefault(node, NodeState())
        if state.health == "quarantined":
            return None
        previous = state.health
        state.health, state.reasons = "quarantined", (f"quarantined by an operator: {reason}",)
        return HealthChange(node, "quarantined", previous, state.reasons, at)

    def observe(self, node: str, samples: list[GpuSample], at: datetime) -> HealthChange | None:
        state = self.nodes.setdefault(node, NodeState())
        critical: list[str] = []
        warnings: list[str] = []
        for sample in samples:
            self._signs(
                state.gpus.setdefault(sample.gpu_uuid, _GpuWatch()), sample, critical, warnings
            )
        # The slices of a shared GPU (MIG devices) carry its readings: one sign each.
        critical, warnings = list(dict.fromkeys(critical)), list(dict.fromkeys(warnings))
        if critical:
            wanted, reasons = "quarantined", tuple(critical)
        elif state.health == "quarantined":
            return None  # only an operator releases a quarantined node
        elif warnings:
            wanted, reasons = "degraded", tuple(warnings)
        elif state.health == "degraded" and (
            state.last_sign is None
            or (at - state.last_sign).total_seconds() < self.policy.clear_after_s
        ):
            # Recent signs: not clear yet. Restored degraded, with no sign seen since:
            # the clear period starts at the first report.
            state.last_sign = state.last_sign or at
            return None
        else:
            wanted, reasons = "healthy", ()
        if critical or warnings:
            state.last_sign = at
        if wanted == state.health:
            if ORDER[wanted] > 0 and set(reasons) - set(state.reasons):
                state.reasons = tuple(dict.fromkeys(state.reasons + reasons))
            return None
        if ORDER[wanted] < ORDER[state.health] and wanted != "healthy":
            return None  # never step down from quarantined to degraded
        previous = state.health
        state.health, state.reasons = wanted, reasons
        return HealthChange(node, wanted, previous, reasons, at)

    def _signs(
        self, watch: _GpuWatch, sample: GpuSample, critical: list[str], warnings: list[str]
    ) -> None:
        policy, gpu = self.policy, f"GPU {sample.index}"
        for xid in sample.xid_errors:
            if xid in QUARANTINE_XIDS:
                critical.append(f"{gpu}: XID {xid}")
        if watch.ecc_uncorrected is not None and sample.ecc_uncorrected > watch.ecc_uncorrected:
            critical.append(f"{gpu}: uncorrected ECC errors rose to {sample.ecc_uncorrected}")
        watch.ecc_uncorrected = sample.ecc_uncorrected
        if sample.temperature_c >= policy.shutdown_c:
            critical.append(f"{gpu}: {sample.temperature_c:.0f} °C, at the shutdown threshold")
        if sample.temperature_c >= policy.hot_c:
            watch.hot_since = watch.hot_since or sample.at
            if (sample.at - watch.hot_since).total_seconds() >= policy.hot_for_s:
                warnings.append(
                    f"{gpu}: {sample.temperature_c:.0f} °C for {policy.hot_for_s:.0f} s"
                )
        else:
            watch.hot_since = None
        marks = watch.corrected_marks
        marks.append((sample.at, sample.ecc_corrected))
        window_start = sample.at - timedelta(minutes=1)
        while len(marks) > 1 and marks[1][0] <= window_start:
            marks.pop(0)
        # Over a gap in the reports the rise is spread over the time it took.
        rise, span_s = marks[-1][1] - marks[0][1], (marks[-1][0] - marks[0][0]).total_seconds()
        per_minute = rise if span_s <= 60 else rise * 60 / span_s
        if per_minute >= policy.corrected_per_minute:
            warnings.append(f"{gpu}: corrected ECC errors climbing ({per_minute:.0f}/min)")
        if sample.throttle_reasons & HW_SLOWDOWN_MASK:
            warnings.append(
                f"{gpu}: hardware slowdown (throttle reasons {sample.throttle_reasons:#x})"
            )
