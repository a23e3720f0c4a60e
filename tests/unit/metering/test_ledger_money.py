"""What GPU and storage time cost (gpucloud_metering.ledger): each price applies
from its moment on and never to time before it, amounts stay exact until one
rounding to cents (half to even), storage is billed per GB-month of 730 hours,
and budget thresholds are crossed at exactly their percentage."""

from __future__ import annotations

import itertools
from decimal import Decimal
from fractions import Fraction

import pytest

from gpucloud_metering import ledger
from gpucloud_metering.ledger import Price, Sample

HOUR = ledger.US_PER_HOUR
GB = ledger.BYTES_PER_GB


def prices(*pairs: tuple[int, str]) -> list[Price]:
    return [Price(start, Decimal(amount)) for start, amount in pairs]


# --- price segments --------------------------------------------------------------


def test_time_before_any_price_is_unpriced_not_free_of_record() -> None:
    assert list(ledger.priced_segments(0, 10, [])) == [(0, 10, None)]
    assert list(ledger.priced_segments(0, 10, prices((5, "1.00")))) == [
        (0, 5, None),
        (5, 10, Decimal("1.00")),
    ]


def test_a_price_that_starts_exactly_at_the_start_applies_from_the_first_microsecond() -> None:
    assert list(ledger.priced_segments(5, 10, prices((5, "2.00")))) == [(5, 10, Decimal("2.00"))]


def test_prices_apply_in_effective_order_whatever_order_they_were_given_in() -> None:
    given = prices((30, "3.00"), (0, "1.00"), (20, "2.00"))
    assert list(ledger.priced_segments(10, 40, given)) == [
        (10, 20, Decimal("1.00")),
        (20, 30, Decimal("2.00")),
        (30, 40, Decimal("3.00")),
    ]


def test_a_price_after_the_range_or_long_before_it_makes_no_extra_segment() -> None:
    given = prices((0, "1.00"), (5, "1.50"), (100, "9.00"))
    assert list(ledger.priced_segments(10, 20, given)) == [(10, 20, Decimal("1.50"))]
    # A change exactly at the end belongs to the time after it.
    assert list(ledger.priced_segments(10, 100, given)) == [(10, 100, Decimal("1.50"))]


def test_price_segments_cover_the_range_once_with_no_gap() -> None:
    given = prices((0, "1"), (7, "2"), (13, "3"), (13_000, "4"))
    segments = list(ledger.priced_segments(3, 20_000, given))
    assert segments[0][0] == 3
    assert segments[-1][1] == 20_000
    assert all(a[1] == b[0] for a, b in itertools.pairwise(segments))
    assert all(start < end for start, end, _ in segments)
    assert [price for _, _, price in segments] == [Decimal(n) for n in "1234"]


def test_an_empty_range_has_no_segments() -> None:
    assert list(ledger.priced_segments(10, 10, prices((0, "1.00")))) == []


# --- GPU amounts -----------------------------------------------------------------


def test_gpu_time_costs_its_price_per_gpu_hour_exactly() -> None:
    assert ledger.gpu_amount(HOUR, Decimal("2.50")) == Decimal("2.50")
    assert ledger.gpu_amount(2 * (HOUR + HOUR // 2), Decimal("2.50")) == Decimal(
        "7.50"
    )  # 2 GPUs, 90 min
    # One GPU-microsecond at 3.60 an hour is a billionth, not zero.
    assert ledger.gpu_amount(1, Decimal("3.60")) == Decimal("1E-9")


def test_gpu_time_with_no_price_yet_costs_nothing() -> None:
    assert ledger.gpu_amount(10 * HOUR, None) == 0


def test_gpu_use_multiplies_by_the_gpus_and_prices_each_part_at_its_own_price() -> None:
    given = prices((0, "2.00"), (HOUR, "4.00"))
    uses = list(ledger.gpu_use(0, 2 * HOUR, 8, given, faults=[]))
    assert [(u.gpu_us, u.price, u.amount, u.credited) for u in uses] == [
        (8 * HOUR, Decimal("2.00"), Fraction("16.00"), False),
        (8 * HOUR, Decimal("4.00"), Fraction("32.00"), False),
    ]


def test_credited_gpu_time_keeps_its_price_but_costs_nothing() -> None:
    given = prices((0, "3.00"))
    uses = list(ledger.gpu_use(0, 3 * HOUR, 2, given, faults=[(HOUR, 2 * HOUR)]))
    assert [(u.gpu_us, u.price, u.amount, u.credited) for u in uses] == [
        (2 * HOUR, Decimal("3.00"), Fraction("6.00"), False),
        (2 * HOUR, Decimal("3.00"), Fraction(0), True),
        (2 * HOUR, Decimal("3.00"), Decimal("6.00"), False),
    ]


def test_a_price_change_inside_a_quarantine_splits_only_the_credited_part() -> None:
    given = prices((0, "1.00"), (HOUR + HOUR // 2, "5.00"))
    uses = list(ledger.gpu_use(0, 2 * HOUR, 1, given, faults=[(HOUR, None)]))
    assert [(u.gpu_us, u.price, u.credited) for u in uses] == [
        (HOUR, Decimal("1.00"), False),
        (HOUR // 2, Decimal("1.00"), True),
        (HOUR // 2, Decimal("5.00"), True),
    ]
    assert sum(u.amount for u in uses) == Decimal("1.00")


def test_every_gpu_microsecond_of_an_interval_is_in_exactly_one_use() -> None:
    given = prices((17, "1.00"), (5_000, "2.00"), (9_999, "3.00"))
    faults: list[ledger.FaultWindow] = [(100, 200), (4_990, 5_010), (9_000, None)]
    uses = list(ledger.gpu_use(0, 12_345, 3, given, faults))
    assert sum(u.gpu_us for u in uses) == 12_345 * 3
    assert sum(u.gpu_us for u in uses if u.credited) == (100 + 20 + 3_345) * 3


# --- rounding --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("amount", "expected"),
    [
        ("0", 0),
        ("0.0049999", 0),
        ("0.005", 0),  # half to even: down to 0
        ("0.0050001", 1),
        ("0.015", 2),  # half to even: up to 2
        ("0.025", 2),
        ("12.345", 1234),
        ("12.355", 1236),
        ("999999.995", 100_000_000),
        ("1234567.891", 123_456_789),
    ],
)
def test_an_exact_amount_is_rounded_to_cents_once_half_to_even(amount: str, expected: int) -> None:
    assert ledger.cents(Decimal(amount)) == expected


def test_rounding_once_at_the_end_is_not_rounding_each_part() -> None:
    """A thousand seconds at 18 an hour: each second is half a cent, rounded alone to 0,
    but the thousand come to 500 cents."""
    second = ledger.gpu_amount(ledger.US_PER_S, Decimal("18.00"))
    assert second == Decimal("0.005")
    assert ledger.cents(second) == 0
    assert ledger.cents(sum((second for _ in range(1000)), Fraction(0))) == 500


# --- storage ---------------------------------------------------------------------


def test_storage_costs_its_price_per_gb_month_of_730_hours() -> None:
    month = GB * HOUR * 730
    assert ledger.storage_amount(month, Decimal("0.10")) == Decimal("0.10")
    assert ledger.storage_amount(GB * HOUR, Decimal("0.73")) == Decimal("0.001")
    assert ledger.storage_amount(month, None) == 0
    # A GB is 10^9 bytes, not 2^30.
    assert ledger.gb_hours(2**30 * HOUR) == Decimal("1.073741824")


def test_each_sample_holds_until_the_next_whatever_order_they_arrive_in() -> None:
    samples = [Sample(300, 7), Sample(100, 5), Sample(200, 0)]
    assert ledger.storage_steps(samples, now_us=400) == [(100, 200, 5), (300, 400, 7)]


def test_the_last_sample_holds_until_now_and_no_step_runs_backwards() -> None:
    assert ledger.storage_steps([Sample(100, 5)], now_us=100) == []
    assert ledger.storage_steps([Sample(100, 5)], now_us=50) == []
    assert ledger.storage_steps([], now_us=50) == []


def test_of_two_samples_at_one_moment_only_the_later_given_holds() -> None:
    assert ledger.storage_steps([Sample(10, 5), Sample(10, 7)], now_us=20) == [(10, 20, 7)]


def test_storage_held_across_a_price_change_pays_each_price_for_its_own_part() -> None:
    given = prices((0, "0.73"), (2 * HOUR, "1.46"))
    byte_us, amount = ledger.storage_cost(HOUR, 3 * HOUR, 10 * GB, given)
    assert byte_us == 10 * GB * 2 * HOUR
    assert amount == Decimal("0.010") + Decimal("0.020")


def test_storage_before_any_storage_price_is_counted_but_free() -> None:
    byte_us, amount = ledger.storage_cost(0, HOUR, GB, [])
    assert (byte_us, amount) == (GB * HOUR, Fraction(0))


def test_a_storage_hour_goes_out_once_a_sample_at_its_end_closes_it() -> None:
    given = prices((0, "0.73"))
    samples = [Sample(0, GB), Sample(HOUR, GB)]
    [(hour, byte_us, amount)] = ledger.final_storage_hours(samples, given)
    assert (hour, byte_us, amount) == (0, GB * HOUR, Fraction("0.001"))
    # One microsecond short of the hour's end: nothing is final yet.
    assert list(ledger.final_storage_hours([Sample(0, GB), Sample(HOUR - 1, GB)], given)) == []


def test_an_hour_with_nothing_stored_sends_nothing() -> None:
    samples = [Sample(0, GB), Sample(HOUR // 2, 0), Sample(3 * HOUR, 0)]
    closed = list(ledger.final_storage_hours(samples, prices((0, "0.73"))))
    assert [(hour, byte_us) for hour, byte_us, _ in closed] == [(0, GB * HOUR // 2)]


def test_a_storage_hour_sums_every_size_it_held() -> None:
    samples = [Sample(HOUR + HOUR // 4, 4 * GB), Sample(HOUR + HOUR // 2, 2 * GB)]
    samples.append(Sample(2 * HOUR, 0))
    [(hour, byte_us, amount)] = ledger.final_storage_hours(samples, prices((0, "0.73")))
    assert hour == HOUR
    assert ledger.gb_hours(byte_us) == Decimal(2)  # 4 GB for 15 min, 2 GB for 30 min
    assert amount == Decimal("0.002")


def test_a_storage_hours_samples_can_arrive_in_any_order() -> None:
    samples = [Sample(2 * HOUR, 0), Sample(0, 3 * GB), Sample(HOUR, GB)]
    closed = list(ledger.final_storage_hours(samples, []))
    assert [(hour, ledger.gb_hours(b)) for hour, b, _ in closed] == [
        (0, Decimal(3)),
        (HOUR, Decimal(1)),
    ]


# --- budgets ---------------------------------------------------------------------


def test_a_threshold_is_crossed_at_exactly_its_percentage() -> None:
    assert ledger.crossed(50, 100, [50, 80, 100]) == [50]
    assert ledger.crossed(49, 100, [50, 80, 100]) == []
    assert ledger.crossed(100, 100, [50, 80, 100]) == [50, 80, 100]


def test_thresholds_are_compared_exactly_not_in_rounded_percent() -> None:
    """799 of 1000 cents is 79.9%: not 80%."""
    assert ledger.crossed(799, 1000, [80]) == []
    assert ledger.crossed(800, 1000, [80]) == [80]
    # 1 cent of a 3-cent budget is 33.33…%: past 33, short of 34.
    assert ledger.crossed(1, 3, [33, 34]) == [33]


def test_thresholds_past_the_budget_need_spend_past_it() -> None:
    assert ledger.crossed(149, 100, [100, 150, 200]) == [100]
    assert ledger.crossed(150, 100, [100, 150, 200]) == [100, 150]
    assert ledger.crossed(0, 100, [1]) == []


def test_pieces_priced_apart_sum_to_the_whole_to_the_cent() -> None:
    """One GPU for an hour at 2.345 an hour, in pieces of 2, 26 and 32 minutes: the
    pieces add up to exactly 2.345, which rounds half to even to 234 cents, as the
    invoice prices the hour whole (a sum of pieces each rounded to 28 digits came to
    235)."""
    price = Decimal("2.345")
    minute = 60 * ledger.US_PER_S
    pieces = [ledger.gpu_amount(m * minute, price) for m in (2, 26, 32)]
    assert sum(pieces, Fraction(0)) == ledger.gpu_amount(ledger.US_PER_HOUR, price)
    assert ledger.cents(sum(pieces, Fraction(0))) == 234
