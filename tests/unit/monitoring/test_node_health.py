"""Node health from samples (health.py): which XIDs, ECC counts, temperatures and
throttle reasons quarantine or degrade a node, at their exact thresholds; how long a
degraded node waits before it is healthy again; and what only an operator may undo."""

from __future__ import annotations

from typing import Any

import pytest

from gpucloud_monitoring.health import QUARANTINE_XIDS, HealthChange, HealthPolicy, HealthTracker

from .samples import T0, at, sample


def observe(
    tracker: HealthTracker, second: float, node: str = "n1", **fields: Any
) -> HealthChange | None:
    """One sample of GPU-1 on `node` at `second`."""
    return tracker.observe(node, [sample(second, **fields)], at(second))


def changed(change: HealthChange | None) -> tuple[str, str, tuple[str, ...]]:
    assert change is not None
    return (change.previous, change.health, change.reasons)


@pytest.mark.parametrize("xid", sorted(QUARANTINE_XIDS))
def test_every_fatal_xid_quarantines_the_node_naming_the_gpu(xid: int) -> None:
    tracker = HealthTracker()
    change = tracker.observe("n1", [sample(0, index=3, xid_errors=(xid,))], T0)
    assert changed(change) == ("healthy", "quarantined", (f"GPU 3: XID {xid}",))
    assert change is not None
    assert (change.node, change.at) == ("n1", T0)


@pytest.mark.parametrize("xid", [13, 31, 43, 45, 61])
def test_an_application_xid_leaves_the_node_healthy(xid: int) -> None:
    """13 (graphics engine exception), 31 (MMU fault), 43 (reset channel), 45 (preemptive
    cleanup), 61 (internal micro-controller breakpoint): a workload's fault, not the GPU's."""
    tracker = HealthTracker()
    assert observe(tracker, 0, xid_errors=(xid,)) is None
    assert tracker.nodes["n1"].health == "healthy"


def test_uncorrected_ecc_quarantines_on_a_rise_not_on_the_count_first_seen() -> None:
    tracker = HealthTracker()
    assert observe(tracker, 0, ecc_uncorrected=5) is None  # the count since the last reset
    assert observe(tracker, 1, ecc_uncorrected=5) is None
    assert changed(observe(tracker, 2, ecc_uncorrected=6)) == (
        "healthy",
        "quarantined",
        ("GPU 0: uncorrected ECC errors rose to 6",),
    )


def test_each_gpu_has_its_own_uncorrected_ecc_baseline() -> None:
    tracker = HealthTracker()
    assert tracker.observe("n1", [sample(0, ecc_uncorrected=2)], T0) is None
    # A second GPU first seen with more errors than the first had: its own baseline.
    assert (
        tracker.observe("n1", [sample(1, gpu_uuid="GPU-2", index=1, ecc_uncorrected=9)], at(1))
        is None
    )


@pytest.mark.parametrize(
    ("temperature", "health"), [(94.9, "healthy"), (95.0, "quarantined"), (102.0, "quarantined")]
)
def test_the_shutdown_temperature_quarantines_at_once(temperature: float, health: str) -> None:
    tracker = HealthTracker()
    observe(tracker, 0, temperature_c=temperature)
    assert tracker.nodes["n1"].health == health


def test_the_shutdown_reason_gives_the_temperature() -> None:
    change = observe(HealthTracker(), 0, temperature_c=97.4)
    assert changed(change)[2] == ("GPU 0: 97 °C, at the shutdown threshold",)


def test_a_gpu_at_the_hot_threshold_degrades_the_node_after_the_hot_period_exactly() -> None:
    tracker = HealthTracker()
    assert observe(tracker, 0, temperature_c=85.0) is None
    assert observe(tracker, 29.9, temperature_c=85.0) is None
    assert changed(observe(tracker, 30, temperature_c=85.0)) == (
        "healthy",
        "degraded",
        ("GPU 0: 85 °C for 30 s",),
    )


def test_one_cool_sample_starts_the_hot_period_again() -> None:
    tracker = HealthTracker()
    observe(tracker, 0, temperature_c=90)
    observe(tracker, 20, temperature_c=84.9)  # just below 85 °C
    assert observe(tracker, 30, temperature_c=90) is None
    assert observe(tracker, 59, temperature_c=90) is None
    assert changed(observe(tracker, 60, temperature_c=90))[1] == "degraded"


def test_corrected_ecc_errors_climbing_within_a_minute_degrade_the_node() -> None:
    tracker = HealthTracker()
    assert observe(tracker, 0, ecc_corrected=1000) is None
    assert observe(tracker, 30, ecc_corrected=1099) is None  # 99 in the window
    assert changed(observe(tracker, 40, ecc_corrected=1100)) == (
        "healthy",
        "degraded",
        ("GPU 0: corrected ECC errors climbing (100/min)",),
    )


def test_corrected_ecc_errors_counted_over_the_last_minute_only() -> None:
    tracker = HealthTracker()
    for second, count in [(0, 0), (30, 50), (90, 149), (150, 240)]:
        # 99 between 30 s and 90 s, 91 between 90 s and 150 s: never 100 in a minute.
        assert observe(tracker, second, ecc_corrected=count) is None
    assert tracker.nodes["n1"].health == "healthy"


@pytest.mark.parametrize("reasons", [0x8, 0x40, 0x80, 0x8 | 0x1])
def test_hardware_slowdown_degrades_the_node(reasons: int) -> None:
    change = observe(HealthTracker(), 0, throttle_reasons=reasons)
    assert changed(change) == (
        "healthy",
        "degraded",
        (f"GPU 0: hardware slowdown (throttle reasons {reasons:#x})",),
    )


@pytest.mark.parametrize("reasons", [0x1, 0x2, 0x4, 0x20, 0x1 | 0x4])
def test_the_drivers_own_power_saving_is_no_sign(reasons: int) -> None:
    """GPU idle, application clocks, software power cap, software thermal slowdown."""
    assert observe(HealthTracker(), 0, throttle_reasons=reasons) is None


def test_a_degraded_node_is_healthy_again_only_a_full_clear_period_after_its_last_sign() -> None:
    tracker = HealthTracker()
    assert changed(observe(tracker, 0, throttle_reasons=0x40))[1] == "degraded"
    assert observe(tracker, 10, throttle_reasons=0x40) is None  # a sign again at 10 s
    assert observe(tracker, 69.9) is None
    assert changed(observe(tracker, 70)) == ("degraded", "healthy", ())


def test_a_degraded_node_gains_reasons_without_a_new_change() -> None:
    tracker = HealthTracker()
    observe(tracker, 0, throttle_reasons=0x40)
    assert observe(tracker, 1, throttle_reasons=0x40, ecc_corrected=0) is None
    tracker.observe("n1", [sample(2, gpu_uuid="GPU-2", index=1, throttle_reasons=0x8)], at(2))
    assert tracker.nodes["n1"].reasons == (
        "GPU 0: hardware slowdown (throttle reasons 0x40)",
        "GPU 1: hardware slowdown (throttle reasons 0x8)",
    )


def test_a_degraded_node_with_a_fault_is_quarantined_from_degraded() -> None:
    tracker = HealthTracker()
    observe(tracker, 0, throttle_reasons=0x40)
    assert changed(observe(tracker, 1, xid_errors=(48,))) == (
        "degraded",
        "quarantined",
        ("GPU 0: XID 48",),
    )


def test_a_quarantined_node_never_steps_down_to_degraded_or_healthy_by_itself() -> None:
    tracker = HealthTracker()
    observe(tracker, 0, xid_errors=(79,))
    assert observe(tracker, 1, throttle_reasons=0x40) is None
    assert observe(tracker, 1000) is None
    assert tracker.nodes["n1"].health == "quarantined"


def test_a_new_fault_of_a_quarantined_node_is_added_to_its_reasons() -> None:
    tracker = HealthTracker()
    observe(tracker, 0, xid_errors=(79,))
    assert observe(tracker, 1, xid_errors=(79, 94)) is None
    assert tracker.nodes["n1"].reasons == ("GPU 0: XID 79", "GPU 0: XID 94")


def test_one_sample_with_several_faults_gives_every_reason_in_order() -> None:
    change = observe(HealthTracker(), 0, xid_errors=(79, 13, 48), temperature_c=96)
    assert changed(change)[2] == (
        "GPU 0: XID 79",
        "GPU 0: XID 48",
        "GPU 0: 96 °C, at the shutdown threshold",
    )


def test_one_nodes_fault_leaves_other_nodes_alone() -> None:
    tracker = HealthTracker()
    observe(tracker, 0, node="n1", xid_errors=(79,))
    assert observe(tracker, 1, node="n2") is None
    assert (tracker.nodes["n1"].health, tracker.nodes["n2"].health) == ("quarantined", "healthy")


def test_an_operator_quarantines_once_and_says_why() -> None:
    tracker = HealthTracker()
    change = tracker.quarantine("n1", "replacing a fan", at(5))
    assert change == HealthChange(
        "n1", "quarantined", "healthy", ("quarantined by an operator: replacing a fan",), at(5)
    )
    assert tracker.quarantine("n1", "again", at(6)) is None
    assert tracker.nodes["n1"].reasons == ("quarantined by an operator: replacing a fan",)


def test_an_operator_quarantine_of_a_degraded_node_says_it_was_degraded() -> None:
    tracker = HealthTracker()
    observe(tracker, 0, throttle_reasons=0x80)
    change = tracker.quarantine("n1", "suspect GPU", at(1))
    assert changed(change)[:2] == ("degraded", "quarantined")


def test_releasing_a_healthy_or_unknown_node_changes_nothing() -> None:
    tracker = HealthTracker()
    assert tracker.release("never-seen", T0) is None
    observe(tracker, 0)
    assert tracker.release("n1", at(1)) is None


def test_a_release_forgets_the_signs_seen_before_it() -> None:
    tracker = HealthTracker()
    observe(tracker, 0, ecc_uncorrected=3)
    observe(tracker, 1, ecc_uncorrected=4)  # quarantined
    assert changed(tracker.release("n1", at(2))) == (
        "quarantined",
        "healthy",
        ("released by an operator",),
    )
    # The count after the release is the new baseline, not a rise over the old one.
    assert observe(tracker, 3, ecc_uncorrected=4) is None
    assert changed(observe(tracker, 4, ecc_uncorrected=5))[1] == "quarantined"


def test_a_node_restored_as_quarantined_stays_so_until_released() -> None:
    tracker = HealthTracker()
    tracker.restore("n1", "quarantined", ("GPU 0: XID 79",))
    assert observe(tracker, 0) is None
    assert changed(tracker.release("n1", at(1)))[:2] == ("quarantined", "healthy")


def test_a_node_restored_as_degraded_heals_once_clear_for_the_clear_period() -> None:
    """Restored at a start with no sign seen since: the clear period runs from its first
    report, so it is healthy again once the period has passed without a sign."""
    tracker = HealthTracker(HealthPolicy(clear_after_s=600))
    tracker.restore("n1", "degraded", ("GPU 0: 90 °C for 60 s",))
    assert observe(tracker, 0) is None
    assert observe(tracker, 599) is None
    assert changed(observe(tracker, 600)) == ("degraded", "healthy", ())


def test_corrected_ecc_errors_after_a_gap_count_at_their_rate_over_it() -> None:
    """0, then 100 ten minutes later: 10 a minute, not a climb of 100 in one."""
    tracker = HealthTracker()
    assert observe(tracker, 0, ecc_corrected=0) is None
    assert observe(tracker, 600, ecc_corrected=100) is None
    assert tracker.nodes["n1"].health == "healthy"
    # A climb within a minute after the gap still counts, at its own rate.
    assert observe(tracker, 630, ecc_corrected=160) is None
    assert changed(observe(tracker, 660, ecc_corrected=400)) == (
        "healthy",
        "degraded",
        ("GPU 0: corrected ECC errors climbing (300/min)",),
    )


def test_a_policy_sets_the_thresholds() -> None:
    tracker = HealthTracker(HealthPolicy(hot_c=70, hot_for_s=0, shutdown_c=80, clear_after_s=5))
    assert changed(observe(tracker, 0, temperature_c=70)) == (
        "healthy",
        "degraded",
        ("GPU 0: 70 °C for 0 s",),
    )
    assert changed(observe(tracker, 5, temperature_c=60)) == ("degraded", "healthy", ())
    assert changed(observe(tracker, 6, temperature_c=80))[1] == "quarantined"
