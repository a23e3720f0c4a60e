"""The ledger's billing rules, as pure functions: intervals follow sequence, prices
split them and never reprice the past, storage is billed per GB-hour, and time on a
quarantined node is credited, never billed."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

from gpucloud_metering import ledger


def test_billing_follows_sequence_not_arrival_and_ignores_pending() -> None:
    transitions = [
        ledger.Transition(4, "running", 40),
        ledger.Transition(1, "pending", 0),
        ledger.Transition(6, "stopped", 100),
        ledger.Transition(2, "scheduled", 10),
        ledger.Transition(5, "stopping", 90),
        ledger.Transition(3, "ready", 30),
    ]
    [interval] = ledger.billable_intervals(transitions, gpus=2)
    assert (interval.start_us, interval.end_us, interval.gpus) == (10, 100, 2)
    # Still running: the interval is open and accrues up to "now".
    so_far = [transition for transition in transitions if transition.sequence <= 4]
    [open_interval] = ledger.billable_intervals(so_far, gpus=1)
    assert open_interval.end_us is None
    assert open_interval.clip(0, 1_000, now_us=70) == (10, 70)


def test_a_price_change_splits_the_interval_and_never_reprices_the_past() -> None:
    hour = ledger.US_PER_HOUR
    prices = [ledger.Price(0, Decimal("2.50")), ledger.Price(10 * hour, Decimal("4.00"))]
    segments = list(ledger.priced_segments(9 * hour, 11 * hour, prices))
    assert [(s, e, p) for s, e, p in segments] == [
        (9 * hour, 10 * hour, Decimal("2.50")),
        (10 * hour, 11 * hour, Decimal("4.00")),
    ]
    total = sum((ledger.gpu_amount((e - s) * 2, p) for s, e, p in segments), Fraction(0))
    assert total == Decimal("13.00")
    assert ledger.cents(Decimal("0.125")) == 12  # half to even, once, at the end
    assert ledger.cents(Decimal("0.135")) == 14


def test_storage_is_billed_per_gb_hour_between_samples() -> None:
    hour = ledger.US_PER_HOUR
    samples = [ledger.Sample(0, 2 * 10**9), ledger.Sample(hour, 0), ledger.Sample(3 * hour, 10**9)]
    steps = ledger.storage_steps(samples, now_us=4 * hour)
    assert steps == [(0, hour, 2 * 10**9), (3 * hour, 4 * hour, 10**9)]
    assert sum(ledger.gb_hours((e - s) * b) for s, e, b in steps) == Decimal(3)


def test_time_on_a_quarantined_node_is_credited_not_billed() -> None:
    hour = ledger.US_PER_HOUR
    transitions = [
        ledger.Transition(1, "pending", 0),
        ledger.Transition(2, "scheduled", hour, node="n1"),
        ledger.Transition(3, "running", hour + 1, node="n1"),
        ledger.Transition(4, "stopped", 5 * hour, node="n1"),
    ]
    [interval] = ledger.billable_intervals(transitions, gpus=2)
    assert interval.node == "n1"
    # Quarantined from 2h to 3h and again from 4.5h on; "degraded" is no fault.
    changes = [
        ledger.HealthChange(4 * hour + hour // 2, "quarantined"),
        ledger.HealthChange(2 * hour, "quarantined"),
        ledger.HealthChange(3 * hour, "degraded"),
        ledger.HealthChange(3 * hour + 10, "healthy"),
    ]
    faults = ledger.fault_windows(changes)
    assert faults == [(2 * hour, 3 * hour), (4 * hour + hour // 2, None)]
    prices = [ledger.Price(0, Decimal("3.00"))]
    uses = list(ledger.gpu_use(interval.start_us, 5 * hour, 2, prices, faults))
    billed = sum(u.gpu_us for u in uses if not u.credited)
    credited = sum(u.gpu_us for u in uses if u.credited)
    assert (billed, credited) == (2 * 2 * hour + hour, 2 * hour + hour)  # 2.5 h and 1.5 h
    assert billed + credited == 2 * 4 * hour  # every GPU-µs counted once
    assert sum((u.amount for u in uses), Fraction(0)) == Decimal("15.00")
    # Time outside the windows is billed in full.
    assert all(not u.credited for u in ledger.gpu_use(hour, 2 * hour, 2, prices, faults))


def test_storage_hours_go_out_once_a_later_sample_closes_them() -> None:
    hour, gb = ledger.US_PER_HOUR, 10**9
    samples = [
        ledger.Sample(0, 2 * gb),
        ledger.Sample(hour // 2, 4 * gb),
        ledger.Sample(2 * hour + 5, 0),
    ]
    prices = [ledger.Price(0, Decimal("0.73"))]  # per GB-month of 730 h: 0.001 per GB-hour
    closed = list(ledger.final_storage_hours(samples, prices))
    assert [(h, ledger.gb_hours(b), a) for h, b, a in closed] == [
        (0, Decimal(3), Fraction("0.003")),
        (hour, Decimal(4), Fraction("0.004")),
    ]  # the third hour holds 5 µs of 4 GB, but nothing closes it yet
    assert list(ledger.final_storage_hours(samples[:2], prices)) == []
