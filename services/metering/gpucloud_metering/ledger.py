"""Usage and money from recorded facts: pure functions, no I/O.

Billing rules:
- An instance is billed for its GPUs while it holds them: from `scheduled`
  (the pod is bound to a node and the GPUs are allocated to it) through
  `ready`, `running` and `stopping`, until `stopped`, `failed` or `deleted`.
  `pending` is free: nothing is held yet.
- A state lasts from its transition's `at` to the next transition's `at`
  (by sequence); the last one, if billable, is open and accrues up to "now".
- Time is counted in integer microseconds, so sums are exact whatever the
  order the facts arrived in.
- A price applies from its `effective_from` until the next price of the same
  meter and spec; an interval crossing a change is split, so a change never
  re-prices the past.
- GPU time on a node while it is quarantined for a hardware fault (from the
  health change that quarantined it until the one that released it) is
  credited: counted and shown, never billed.
- Storage is billed per GB-month of 730 hours (1 GB = 10⁹ bytes), each sample's
  size holding until the next sample.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction

BILLABLE_STATES = frozenset({"scheduled", "ready", "running", "stopping"})
US_PER_S = 1_000_000
US_PER_HOUR = 3600 * US_PER_S
HOURS_PER_MONTH = 730
BYTES_PER_GB = 10**9
CENT = Decimal("0.01")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def to_us(at: datetime) -> int:
    """Microseconds since the epoch, exactly (no float on the way)."""
    delta = at.astimezone(UTC) - EPOCH
    return (delta.days * 86_400 + delta.seconds) * US_PER_S + delta.microseconds


def from_us(us: int) -> datetime:
    return EPOCH + timedelta(microseconds=us)


@dataclass(frozen=True)
class Transition:
    sequence: int
    state: str
    at_us: int
    #: The node the instance is on, once it is scheduled.
    node: str | None = None


@dataclass(frozen=True)
class Interval:
    """[start_us, end_us) holding `gpus` GPUs; end None while still open."""

    start_us: int
    end_us: int | None
    gpus: int
    #: The sequence of the transition that opened it: a stable id for the slice.
    opened_by: int
    #: The sequence of the transition that closed it, if any.
    closed_by: int | None = None
    #: The node its GPUs were on (unknown for facts recorded before nodes were).
    node: str | None = None

    def clip(self, start_us: int, end_us: int, now_us: int) -> tuple[int, int] | None:
        stop = min(self.end_us if self.end_us is not None else now_us, end_us)
        begin = max(self.start_us, start_us)
        return (begin, stop) if stop > begin else None


def billable_intervals(transitions: Iterable[Transition], gpus: int) -> list[Interval]:
    """Merge contiguous billable states into intervals (one per stay on a node)."""
    ordered = sorted(transitions, key=lambda t: t.sequence)
    intervals: list[Interval] = []
    for index, transition in enumerate(ordered):
        if transition.state not in BILLABLE_STATES:
            continue
        following = ordered[index + 1] if index + 1 < len(ordered) else None
        end = following.at_us if following is not None else None
        closed_by = following.sequence if following is not None else None
        previous = intervals[-1] if intervals else None
        if previous is not None and previous.closed_by == transition.sequence:
            intervals[-1] = Interval(
                previous.start_us, end, gpus, previous.opened_by, closed_by,
                previous.node or transition.node,
            )  # fmt: skip
        else:
            intervals.append(
                Interval(
                    transition.at_us, end, gpus, transition.sequence, closed_by, transition.node
                )
            )
    return intervals


@dataclass(frozen=True)
class HealthChange:
    at_us: int
    health: str


#: [start, end) in which a node was quarantined; end None while it still is.
FaultWindow = tuple[int, int | None]


def fault_windows(changes: Iterable[HealthChange]) -> list[FaultWindow]:
    """A node's quarantines, in order, from its health changes."""
    windows: list[FaultWindow] = []
    opened: int | None = None
    for change in sorted(changes, key=lambda c: c.at_us):
        if change.health == "quarantined" and opened is None:
            opened = change.at_us
        elif change.health != "quarantined" and opened is not None:
            windows.append((opened, change.at_us))
            opened = None
    if opened is not None:
        windows.append((opened, None))
    return windows


def fault_pieces(
    start_us: int, end_us: int, faults: list[FaultWindow]
) -> Iterator[tuple[int, int, bool]]:
    """[start, end) cut at the fault windows: (start, end, inside a fault window)."""
    cursor = start_us
    for window_start, window_end in faults:
        begin = max(window_start, cursor)
        stop = min(end_us if window_end is None else window_end, end_us)
        if stop <= begin:
            continue
        if begin > cursor:
            yield cursor, begin, False
        yield begin, stop, True
        cursor = stop
    if cursor < end_us:
        yield cursor, end_us, False


def contiguous_through(sequences: Iterable[int]) -> int:
    """The highest k such that transitions 1..k are all known (0 if the first is missing)."""
    known = set(sequences)
    k = 0
    while k + 1 in known:
        k += 1
    return k


def split_by_day(start_us: int, end_us: int) -> Iterator[tuple[str, int, int]]:
    """(UTC date, start, end) pieces of [start, end)."""
    cursor = start_us
    while cursor < end_us:
        day = from_us(cursor).date()
        midnight = to_us(datetime(day.year, day.month, day.day, tzinfo=UTC) + timedelta(days=1))
        stop = min(end_us, midnight)
        yield day.isoformat(), cursor, stop
        cursor = stop


@dataclass(frozen=True)
class Price:
    effective_from_us: int
    #: Currency units per GPU-hour (GPU meter) or per GB-month (storage meter).
    amount: Decimal


def priced_segments(
    start_us: int, end_us: int, prices: list[Price]
) -> Iterator[tuple[int, int, Decimal | None]]:
    """[start, end) cut at price changes: (start, end, price or None if none applied yet)."""
    ordered = sorted(prices, key=lambda p: p.effective_from_us)
    cursor = start_us
    while cursor < end_us:
        current = None
        next_change = end_us
        for price in ordered:
            if price.effective_from_us <= cursor:
                current = price.amount
            else:
                next_change = min(next_change, price.effective_from_us)
                break
        yield cursor, next_change, current
        cursor = next_change


@dataclass(frozen=True)
class GpuUse:
    gpu_us: int
    #: Per GPU-hour; None before any price applied.
    price: Decimal | None
    #: Exact; 0 when credited.
    amount: Fraction
    #: On a quarantined node: counted, not billed.
    credited: bool


def gpu_use(
    start_us: int, end_us: int, gpus: int, prices: list[Price], faults: list[FaultWindow]
) -> Iterator[GpuUse]:
    """[start, end) of `gpus` GPUs, cut at fault windows and price changes."""
    for piece_start, piece_end, credited in fault_pieces(start_us, end_us, faults):
        for seg_start, seg_end, price in priced_segments(piece_start, piece_end, prices):
            gpu_us = (seg_end - seg_start) * gpus
            amount = Fraction(0) if credited else gpu_amount(gpu_us, price)
            yield GpuUse(gpu_us, price, amount, credited)


# Amounts are exact fractions of a dollar: a price per hour spread over microseconds
# has no finite decimal form, and a sum of pieces each rounded to 28 digits can land
# on the wrong side of a half cent (a budget's 235 against the invoice's 234).


def gpu_amount(gpu_us: int, price_per_gpu_hour: Decimal | None) -> Fraction:
    if price_per_gpu_hour is None:
        return Fraction(0)
    return gpu_us * Fraction(price_per_gpu_hour) / US_PER_HOUR


def storage_amount(byte_us: int, price_per_gb_month: Decimal | None) -> Fraction:
    if price_per_gb_month is None:
        return Fraction(0)
    return byte_us * Fraction(price_per_gb_month) / (BYTES_PER_GB * US_PER_HOUR * HOURS_PER_MONTH)


def as_decimal(amount: Fraction) -> Decimal:
    """An exact amount as shown: to 28 significant digits."""
    return Decimal(amount.numerator) / Decimal(amount.denominator)


def gb_hours(byte_us: int) -> Decimal:
    return Decimal(byte_us) / (BYTES_PER_GB * US_PER_HOUR)


def cents(amount: Fraction | Decimal) -> int:
    """Round once, at the end, half to even, from the exact amount."""
    return round(Fraction(amount) * 100)


@dataclass(frozen=True)
class Sample:
    at_us: int
    bytes_used: int


def storage_steps(samples: Iterable[Sample], now_us: int) -> list[tuple[int, int, int]]:
    """(start, end, bytes) steps: each sample's size holds until the next sample."""
    ordered = sorted(samples, key=lambda s: s.at_us)
    steps = []
    for index, sample in enumerate(ordered):
        end = ordered[index + 1].at_us if index + 1 < len(ordered) else now_us
        if end > sample.at_us and sample.bytes_used > 0:
            steps.append((sample.at_us, end, sample.bytes_used))
    return steps


def storage_cost(
    start_us: int, end_us: int, size: int, prices: list[Price]
) -> tuple[int, Fraction]:
    """Byte-µs and exact amount of `size` bytes held over [start, end), each price
    applied to its own part."""
    byte_us_total, amount = 0, Fraction(0)
    for seg_start, seg_end, price in priced_segments(start_us, end_us, prices):
        byte_us = (seg_end - seg_start) * size
        byte_us_total += byte_us
        amount += storage_amount(byte_us, price)
    return byte_us_total, amount


def final_storage_hours(
    samples: Iterable[Sample], prices: list[Price]
) -> Iterator[tuple[int, int, Fraction]]:
    """(hour start, byte-µs, exact amount) of each UTC hour with bytes stored that a
    sample at or after the hour's end has closed: no later sample can change it."""
    ordered = sorted(samples, key=lambda s: s.at_us)
    if not ordered:
        return
    closed_at = ordered[-1].at_us
    byte_us_by_hour: dict[int, int] = defaultdict(int)
    amount_by_hour: dict[int, Fraction] = defaultdict(Fraction)
    for start, end, size in storage_steps(ordered, closed_at):
        cursor = start
        while cursor < end:
            hour = cursor - cursor % US_PER_HOUR
            stop = min(end, hour + US_PER_HOUR)
            byte_us, amount = storage_cost(cursor, stop, size, prices)
            byte_us_by_hour[hour] += byte_us
            amount_by_hour[hour] += amount
            cursor = stop
    for hour in sorted(byte_us_by_hour):
        if hour + US_PER_HOUR <= closed_at:
            yield hour, byte_us_by_hour[hour], amount_by_hour[hour]


def crossed(spent_cents: int, budget_cents: int, thresholds: Iterable[int]) -> list[int]:
    """The thresholds (percent of the budget) that the spend has reached."""
    return [pct for pct in thresholds if spent_cents * 100 >= pct * budget_cents]


def month_bounds(period: str) -> tuple[int, int]:
    """[start, end) of a `YYYY-MM` period in microseconds, UTC."""
    year, month = (int(part) for part in period.split("-"))
    start = datetime(year, month, 1, tzinfo=UTC)
    end = datetime(year + month // 12, month % 12 + 1, 1, tzinfo=UTC)
    return to_us(start), to_us(end)


def period_of(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m")
