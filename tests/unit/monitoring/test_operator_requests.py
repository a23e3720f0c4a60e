"""An operator's quarantine and release against the node's own faults: a request is
applied in the order it was made, so a replayed or stale one changes nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gpucloud_libs.events import GpuSample
from gpucloud_monitoring.health import HealthTracker

T0 = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)


def _seconds(n: float) -> datetime:
    return T0 + timedelta(seconds=n)


def _xid(at: datetime) -> GpuSample:
    return GpuSample(
        gpu_uuid="GPU-0", index=0, at=at, utilization_gpu_pct=0, utilization_memory_pct=0,
        memory_used_mib=0, memory_total_mib=81559, temperature_c=40, power_w=70,
        xid_errors=(79,),
    )  # fmt: skip


def test_a_replayed_release_cannot_undo_a_later_fault() -> None:
    tracker = HealthTracker()
    assert tracker.quarantine("n1", "maintenance", _seconds(0)) is not None
    release = _seconds(10)
    assert tracker.release("n1", release) is not None
    # The GPU falls off the bus after the release: quarantined by the fault.
    fault = tracker.observe("n1", [_xid(_seconds(20))], _seconds(20), received=_seconds(20))
    assert fault is not None
    assert fault.health == "quarantined"
    # The same sealed release, sent again, is older than the fault: nothing changes.
    assert tracker.release("n1", release) is None
    assert tracker.nodes["n1"].health == "quarantined"
    # A release made after the fault is applied.
    assert tracker.release("n1", _seconds(30)) is not None
    assert tracker.nodes["n1"].health == "healthy"


def test_a_replayed_quarantine_cannot_undo_a_later_release() -> None:
    tracker = HealthTracker()
    quarantine = _seconds(0)
    assert tracker.quarantine("n1", "maintenance", quarantine) is not None
    assert tracker.release("n1", _seconds(5)) is not None
    assert tracker.quarantine("n1", "maintenance", quarantine) is None
    assert tracker.nodes["n1"].health == "healthy"


def test_a_fault_is_ordered_by_when_it_was_read_not_by_the_nodes_clock() -> None:
    """A node whose clock runs a minute ahead cannot make the operator's release look
    older than its fault."""
    tracker = HealthTracker()
    ahead = _seconds(60)
    assert tracker.observe("n1", [_xid(ahead)], ahead, received=_seconds(0)) is not None
    assert tracker.release("n1", _seconds(10)) is not None


def test_after_a_restart_a_request_older_than_the_stored_change_is_stale() -> None:
    tracker = HealthTracker()
    tracker.restore("n1", "quarantined", ("GPU 0: XID 79",), _seconds(100))
    assert tracker.release("n1", _seconds(50)) is None
    assert tracker.release("n1", _seconds(150)) is not None
