"""A tenant's spend this month, as budgets and spend caps read it
(gpucloud_metering.budgets.month_to_date_cents), and the budget a tenant admin
sets (schemas.BudgetSet): the UTC month alone, up to the moment asked, GPU and
storage together, quarantines credited, rounded once to cents."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from pydantic import ValidationError

from gpucloud_metering import ledger
from gpucloud_metering.budgets import SPENDERS, month_to_date_cents, month_to_date_cents_by
from gpucloud_metering.documents import PriceDoc, SampleDoc, TransitionDoc
from gpucloud_metering.schemas import BudgetSet
from gpucloud_metering.tally import FaultBook, PriceBook

HOUR = ledger.US_PER_HOUR
MARCH = datetime(2026, 3, 1, tzinfo=UTC)
MID_MARCH = datetime(2026, 3, 15, 12, tzinfo=UTC)


def us(at: datetime) -> int:
    return ledger.to_us(at)


def stay(
    instance_id: str, start: datetime, end: datetime | None, **fields: Any
) -> list[TransitionDoc]:
    """An instance scheduled at `start` until stopped at `end` (None: still running)."""
    base: dict[str, Any] = {
        "event_id": "ev", "tenant_id": "t-1", "instance_id": instance_id,
        "spec_name": "h100x1", "gpu_type": "NVIDIA-H100", "gpu_count": 1, "zone": "zone-a",
        "node": "n1", "user_id": "u-1",
    } | fields  # fmt: skip
    moments = [(1, "scheduled", start)] + ([(2, "stopped", end)] if end is not None else [])
    return [
        base | {"_id": f"t-1/{instance_id}#{n}", "sequence": n, "state": s, "at_us": us(at)}  # type: ignore[misc]
        for n, s, at in moments
    ]


def book(*amounts: tuple[str, str | None]) -> PriceBook:
    docs: list[PriceDoc] = [
        {
            "_id": f"{spec}@0",
            "meter": "gpu_hour" if spec else "storage_gb_month",
            "spec_name": spec,
            "amount": amount,
            "effective_from": ledger.from_us(0),
            "effective_from_us": 0,
        }
        for amount, spec in amounts
    ]
    return PriceBook(docs)


GPU_AT_2 = book(("2.00", "h100x1"))


def spent(
    transitions: list[TransitionDoc],
    at: datetime,
    prices: PriceBook = GPU_AT_2,
    *,
    samples: list[SampleDoc] | None = None,
    faults: FaultBook | None = None,
) -> int:
    return month_to_date_cents(transitions, samples or [], at, prices, faults or FaultBook([]))


def test_nothing_used_is_nothing_spent() -> None:
    assert spent([], MID_MARCH) == 0


def test_a_stopped_instance_costs_its_hours_at_its_specs_price() -> None:
    assert spent(stay("a", MID_MARCH - timedelta(hours=3), MID_MARCH), MID_MARCH) == 600


def test_a_running_instance_is_spent_up_to_the_moment_asked_and_no_further() -> None:
    running = stay("a", MID_MARCH - timedelta(hours=1), None)
    assert spent(running, MID_MARCH) == 200
    assert spent(running, MID_MARCH + timedelta(minutes=30)) == 300


def test_only_this_utc_months_part_of_an_instance_over_the_month_change_is_spent() -> None:
    across = stay("a", MARCH - timedelta(hours=5), MARCH + timedelta(hours=2))
    assert spent(across, MID_MARCH) == 400
    # Asked on the last microsecond of February, the same facts spend February's part.
    assert spent(across, MARCH - timedelta(microseconds=1)) == 1000


def test_the_month_is_the_utc_one_whatever_zone_the_moment_is_given_in() -> None:
    across = stay("a", MARCH - timedelta(hours=5), MARCH + timedelta(hours=2))
    # 01:00 on 1 March in UTC+2 is still February in UTC.
    in_paris = datetime(2026, 3, 1, 1, tzinfo=timezone(timedelta(hours=2)))
    assert spent(across, in_paris) == 1000


def test_spend_is_rounded_once_over_the_month_not_per_instance() -> None:
    """Three instances of one second at 18.00 an hour cost half a cent each: 1.5 cents
    in all, 2 cents rounded, where rounding each would make 0."""
    prices = book(("18.00", "h100x1"))

    def seconds(count: int) -> list[TransitionDoc]:
        starts = [MID_MARCH - timedelta(hours=n + 1) for n in range(count)]
        return [
            doc
            for n, start in enumerate(starts)
            for doc in stay(f"i{n}", start, start + timedelta(seconds=1))
        ]

    assert spent(seconds(3), MID_MARCH, prices) == 2
    assert spent(seconds(2), MID_MARCH, prices) == 1  # 1.0 cent
    assert spent(seconds(1), MID_MARCH, prices) == 0  # half a cent rounds to even


def test_storage_is_spent_with_gpu_time() -> None:
    samples: list[SampleDoc] = [
        {"_id": "s@0", "tenant_id": "t-1", "storage_id": "s", "kind": "volume",
         "bytes_used": 1000 * ledger.BYTES_PER_GB, "at_us": us(MID_MARCH - timedelta(hours=10))},
    ]  # fmt: skip
    prices = book(("2.00", "h100x1"), ("7.30", None))  # 0.01 per GB-hour
    gpu = stay("a", MID_MARCH - timedelta(hours=1), MID_MARCH)
    assert spent([], MID_MARCH, prices, samples=samples) == 10_000  # 1000 GB for 10 h
    assert spent(gpu, MID_MARCH, prices, samples=samples) == 10_200


def test_time_on_a_quarantined_node_is_not_spent() -> None:
    faults = FaultBook([
        {"_id": "q", "node": "n1", "health": "quarantined", "at_us": us(MID_MARCH - timedelta(hours=2))},
        {"_id": "h", "node": "n1", "health": "healthy", "at_us": us(MID_MARCH - timedelta(hours=1))},
    ])  # fmt: skip
    docs = stay("a", MID_MARCH - timedelta(hours=3), MID_MARCH)
    assert spent(docs, MID_MARCH, faults=faults) == 400


def test_each_spec_pays_its_own_price() -> None:
    prices = book(("2.00", "h100x1"), ("10.00", "h100x8"))
    docs = [
        *stay("a", MID_MARCH - timedelta(hours=1), MID_MARCH),
        *stay("b", MID_MARCH - timedelta(hours=1), MID_MARCH, spec_name="h100x8", gpu_count=8),
    ]
    assert spent(docs, MID_MARCH, prices) == 200 + 8 * 1000


# --- the budget a tenant admin sets ----------------------------------------------


def test_each_user_and_each_project_spends_its_own_workloads_gpu_time() -> None:
    """What users' limits and projects' budgets are held to; facts from before
    projects are `default`'s."""
    three_hours = MID_MARCH - timedelta(hours=3)
    facts = [
        *stay("a", three_hours, MID_MARCH),
        *stay("b", three_hours, MID_MARCH, user_id="u-2", project="vision"),
        *stay("c", MID_MARCH - timedelta(hours=1), None, user_id="u-2", project="vision"),
    ]
    by = {spender: month_to_date_cents_by(spender, facts, MID_MARCH, GPU_AT_2, FaultBook([]))
          for spender in SPENDERS}  # fmt: skip
    assert by == {"user": {"u-1": 600, "u-2": 800}, "project": {"default": 600, "vision": 800}}


def test_a_budget_alerts_at_50_80_and_100_percent_unless_told_otherwise() -> None:
    budget = BudgetSet.model_validate({"monthlyBudgetCents": 10_000})
    assert (budget.monthly_budget_cents, budget.thresholds, budget.hard_stop) == (
        10_000,
        [50, 80, 100],
        False,
    )


def test_thresholds_are_kept_in_ascending_order() -> None:
    budget = BudgetSet(monthly_budget_cents=1, thresholds=[120, 10, 90])
    assert budget.thresholds == [10, 90, 120]


@pytest.mark.parametrize(
    "thresholds",
    [[], [50, 50], [0], [-10], [1001], list(range(1, 12))],
    ids=["none", "repeated", "zero", "negative", "over-1000", "eleven"],
)
def test_thresholds_must_be_one_to_ten_distinct_percentages_to_1000(thresholds: list[int]) -> None:
    with pytest.raises(ValidationError):
        BudgetSet(monthly_budget_cents=100, thresholds=thresholds)


def test_the_extreme_thresholds_allowed_are_1_and_1000_percent() -> None:
    assert BudgetSet(monthly_budget_cents=100, thresholds=[1000, 1]).thresholds == [1, 1000]


@pytest.mark.parametrize("cents", [0, -1, 10**13 + 1])
def test_a_budget_is_at_least_a_cent_and_at_most_100_billion(cents: int) -> None:
    with pytest.raises(ValidationError):
        BudgetSet(monthly_budget_cents=cents)


def test_a_budget_with_an_unknown_field_is_refused() -> None:
    with pytest.raises(ValidationError, match="hardStopp"):
        BudgetSet.model_validate({"monthlyBudgetCents": 100, "hardStopp": True})
