"""When GPU time is billed (gpucloud_metering.ledger): time to the microsecond, the
intervals a workload holds its GPUs, the facts still missing before an interval is
final, quarantines cut out of them, and the UTC days and months they are shown by."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta, timezone

import pytest

from gpucloud_metering import ledger
from gpucloud_metering.ledger import HealthChange, Interval, Transition

HOUR = ledger.US_PER_HOUR
DAY = 24 * HOUR


def at(year: int, month: int, day: int, hour: int = 0) -> int:
    """Microseconds since the epoch of a UTC moment: at(2026, 3, 1, 12)."""
    return ledger.to_us(datetime(year, month, day, hour, tzinfo=UTC))


def states(*named: str) -> list[Transition]:
    """Transitions 1..n, each 10 µs times its sequence after the epoch, on node n1."""
    return [Transition(n, state, 10 * n, node="n1") for n, state in enumerate(named, start=1)]


# --- time ------------------------------------------------------------------------


def test_a_moment_is_counted_to_the_microsecond_and_read_back_unchanged() -> None:
    moment = datetime(2026, 11, 27, 4, 30, 0, 123456, tzinfo=UTC)
    assert ledger.to_us(moment) == 1_795_753_800_123_456
    assert ledger.from_us(1_795_753_800_123_456) == moment
    assert ledger.to_us(moment + timedelta(microseconds=1)) - ledger.to_us(moment) == 1


def test_a_moment_in_another_zone_counts_as_the_same_utc_instant() -> None:
    paris = timezone(timedelta(hours=2))
    assert ledger.to_us(datetime(2026, 3, 1, 1, 0, tzinfo=paris)) == at(2026, 2, 28, 23)
    # The month is the UTC one, whatever zone the moment was given in.
    assert ledger.period_of(datetime(2026, 3, 1, 1, 0, tzinfo=paris)) == "2026-02"
    assert ledger.period_of(datetime(2026, 2, 28, 23, 0, tzinfo=timezone(-timedelta(hours=5)))) == (
        "2026-03"
    )


def test_moments_before_the_epoch_are_negative_and_still_exact() -> None:
    assert ledger.to_us(datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)) == -1
    assert ledger.from_us(-1) == datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)


@pytest.mark.parametrize(
    ("period", "start", "end"),
    [
        ("2026-01", datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 2, 1, tzinfo=UTC)),
        ("2026-02", datetime(2026, 2, 1, tzinfo=UTC), datetime(2026, 3, 1, tzinfo=UTC)),
        ("2028-02", datetime(2028, 2, 1, tzinfo=UTC), datetime(2028, 3, 1, tzinfo=UTC)),
        ("2026-11", datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC)),
        ("2026-12", datetime(2026, 12, 1, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC)),
    ],
)
def test_a_month_runs_from_its_first_midnight_to_the_next_months(
    period: str, start: datetime, end: datetime
) -> None:
    assert ledger.month_bounds(period) == (ledger.to_us(start), ledger.to_us(end))


def test_consecutive_months_meet_with_no_gap_and_no_overlap() -> None:
    ends = [ledger.month_bounds(f"2026-{month:02}") for month in range(1, 13)]
    for (_, end), (start, _) in itertools.pairwise(ends):
        assert end == start
    assert sum(end - start for start, end in ends) == 365 * DAY


def test_time_is_shown_by_utc_day_split_at_each_midnight() -> None:
    start, end = at(2026, 2, 28, 23), at(2026, 3, 2, 1)
    assert list(ledger.split_by_day(start, end)) == [
        ("2026-02-28", start, at(2026, 3, 1)),
        ("2026-03-01", at(2026, 3, 1), at(2026, 3, 2)),
        ("2026-03-02", at(2026, 3, 2), end),
    ]


def test_a_day_split_loses_no_microsecond_and_skips_an_empty_range() -> None:
    start, end = at(2026, 1, 1) - 1, at(2026, 1, 1) + 1
    pieces = list(ledger.split_by_day(start, end))
    assert [(day, e - s) for day, s, e in pieces] == [("2025-12-31", 1), ("2026-01-01", 1)]
    assert list(ledger.split_by_day(end, end)) == []
    # Ending exactly at midnight makes no empty piece for the next day.
    assert [day for day, _, _ in ledger.split_by_day(at(2026, 1, 1), at(2026, 1, 2))] == [
        "2026-01-01"
    ]


# --- intervals -------------------------------------------------------------------


def test_pending_and_queued_time_is_free_and_scheduled_starts_the_bill() -> None:
    [interval] = ledger.billable_intervals(
        states("queued", "pending", "scheduled", "running", "stopped"), gpus=4
    )
    assert (interval.start_us, interval.end_us, interval.gpus) == (30, 50, 4)
    assert (interval.opened_by, interval.closed_by, interval.node) == (3, 5, "n1")


@pytest.mark.parametrize("end", ["stopped", "failed", "deleted"])
def test_each_ending_state_closes_the_interval(end: str) -> None:
    [interval] = ledger.billable_intervals(states("scheduled", "ready", "stopping", end), gpus=1)
    assert (interval.start_us, interval.end_us, interval.closed_by) == (10, 40, 4)


def test_a_stop_and_a_restart_are_two_intervals_with_their_own_ids() -> None:
    first, second = ledger.billable_intervals(
        states("scheduled", "running", "stopped", "pending", "scheduled", "running"), gpus=2
    )
    assert (first.start_us, first.end_us, first.opened_by, first.closed_by) == (10, 30, 1, 3)
    assert (second.start_us, second.end_us, second.opened_by, second.closed_by) == (
        50,
        None,
        5,
        None,
    )


def test_no_transitions_or_no_billable_state_bill_nothing() -> None:
    assert ledger.billable_intervals([], gpus=8) == []
    assert ledger.billable_intervals(states("pending", "failed"), gpus=8) == []


def test_an_interval_keeps_the_node_it_was_scheduled_on() -> None:
    transitions = [
        Transition(1, "pending", 0),
        Transition(2, "scheduled", 10, node="n7"),
        Transition(3, "running", 20),  # a transition that does not repeat the node
        Transition(4, "stopped", 30),
    ]
    [interval] = ledger.billable_intervals(transitions, gpus=1)
    assert interval.node == "n7"


def test_a_node_learnt_only_after_scheduling_is_still_the_intervals() -> None:
    transitions = [Transition(1, "scheduled", 0), Transition(2, "running", 5, node="n2")]
    [interval] = ledger.billable_intervals(transitions, gpus=1)
    assert interval.node == "n2"


def test_a_missing_transition_in_the_middle_does_not_split_a_stay() -> None:
    """Sequence 3 has not arrived: running (2) lasts until the next known one (4)."""
    transitions = [
        Transition(1, "scheduled", 0),
        Transition(2, "running", 10),
        Transition(4, "stopping", 40),
        Transition(5, "stopped", 50),
    ]
    [interval] = ledger.billable_intervals(transitions, gpus=1)
    assert (interval.start_us, interval.end_us, interval.closed_by) == (0, 50, 5)
    assert ledger.contiguous_through(t.sequence for t in transitions) == 2


def test_facts_known_contiguously_from_the_first_settle_the_intervals() -> None:
    assert ledger.contiguous_through([]) == 0
    assert ledger.contiguous_through([2, 3, 4]) == 0  # the first is missing
    assert ledger.contiguous_through([3, 1, 2, 2]) == 3  # order and repeats do not matter
    assert ledger.contiguous_through([1, 2, 4, 5]) == 2


def test_an_open_interval_accrues_up_to_now_and_a_closed_one_does_not() -> None:
    open_one = Interval(start_us=100, end_us=None, gpus=1, opened_by=2)
    closed = Interval(start_us=100, end_us=200, gpus=1, opened_by=2, closed_by=3)
    assert open_one.clip(0, 1_000, now_us=150) == (100, 150)
    assert closed.clip(0, 1_000, now_us=150) == (100, 200)
    assert closed.clip(0, 1_000, now_us=10_000) == (100, 200)


def test_an_interval_is_clipped_to_the_range_asked_for() -> None:
    interval = Interval(start_us=100, end_us=200, gpus=1, opened_by=1, closed_by=2)
    assert interval.clip(150, 180, now_us=0) == (150, 180)
    assert interval.clip(0, 150, now_us=0) == (100, 150)
    # Touching the range at one end is no time inside it.
    assert interval.clip(200, 300, now_us=0) is None
    assert interval.clip(0, 100, now_us=0) is None
    # Not started by "now": nothing yet.
    assert Interval(100, None, 1, 1).clip(0, 1_000, now_us=100) is None


# --- quarantines -----------------------------------------------------------------


def test_a_node_quarantined_twice_has_two_windows_and_repeats_change_nothing() -> None:
    changes = [
        HealthChange(10, "quarantined"),
        HealthChange(15, "quarantined"),  # still the same quarantine
        HealthChange(20, "degraded"),  # released, though not healthy
        HealthChange(25, "healthy"),
        HealthChange(30, "quarantined"),
        HealthChange(40, "healthy"),
    ]
    assert ledger.fault_windows(reversed(changes)) == [(10, 20), (30, 40)]


def test_health_changes_without_a_quarantine_make_no_window() -> None:
    assert ledger.fault_windows([]) == []
    assert ledger.fault_windows([HealthChange(1, "degraded"), HealthChange(2, "healthy")]) == []


def test_a_quarantine_never_released_is_still_open() -> None:
    changes = [HealthChange(10, "quarantined"), HealthChange(20, "healthy")]
    changes.append(HealthChange(50, "quarantined"))
    assert ledger.fault_windows(changes) == [(10, 20), (50, None)]


def test_an_interval_is_cut_at_each_quarantine_and_every_microsecond_is_in_one_piece() -> None:
    pieces = list(ledger.fault_pieces(0, 100, [(20, 40), (60, None)]))
    assert pieces == [(0, 20, False), (20, 40, True), (40, 60, False), (60, 100, True)]
    covered = [e - s for s, e, _ in pieces]
    assert sum(covered) == 100
    assert all(later[0] == earlier[1] for earlier, later in itertools.pairwise(pieces))


def test_quarantines_outside_the_interval_leave_it_whole() -> None:
    assert list(ledger.fault_pieces(50, 60, [(0, 10), (10, 50), (60, None)])) == [(50, 60, False)]
    assert list(ledger.fault_pieces(50, 60, [])) == [(50, 60, False)]


def test_an_interval_inside_a_quarantine_is_credited_whole() -> None:
    assert list(ledger.fault_pieces(50, 60, [(0, None)])) == [(50, 60, True)]
    assert list(ledger.fault_pieces(50, 60, [(40, 70)])) == [(50, 60, True)]
    # A quarantine that began midway credits from then on.
    assert list(ledger.fault_pieces(50, 60, [(55, 90)])) == [(50, 55, False), (55, 60, True)]
