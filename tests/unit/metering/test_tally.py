"""Usage over many workloads (gpucloud_metering.tally): recorded facts grouped into
workloads, priced by their spec, credited on quarantined nodes, and summed per report
row; shared-GPU units counted at their weight and priced per unit; storage by tenant."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest

from gpucloud_metering import ledger
from gpucloud_metering.documents import HealthChangeDoc, PriceDoc, SampleDoc, TransitionDoc
from gpucloud_metering.schemas import GroupBy
from gpucloud_metering.tally import (
    FaultBook,
    PriceBook,
    Tally,
    instances_from,
    tally,
    usage_row,
)

HOUR = ledger.US_PER_HOUR
GB = ledger.BYTES_PER_GB
#: 2026-03-01T00:00Z, a day boundary, in µs.
T0 = ledger.to_us(datetime(2026, 3, 1, tzinfo=UTC))


def transition(
    instance_id: str, sequence: int, state: str, at_us: int, **fields: Any
) -> TransitionDoc:
    doc: dict[str, Any] = {
        "_id": f"t-1/{instance_id}#{sequence}", "event_id": f"ev-{instance_id}-{sequence}",
        "tenant_id": "t-1", "instance_id": instance_id, "sequence": sequence, "state": state,
        "at_us": at_us, "spec_name": "h100x1", "gpu_type": "NVIDIA-H100", "gpu_count": 1,
        "zone": "zone-a", "node": "n1", "user_id": "u-1", "recorded_us": at_us,
    }  # fmt: skip
    doc.update(fields)
    return doc  # type: ignore[return-value]


def ran(instance_id: str, start_us: int, end_us: int | None, **fields: Any) -> list[TransitionDoc]:
    """An instance scheduled at `start_us` and stopped at `end_us` (None: still running)."""
    docs = [
        transition(instance_id, 1, "pending", start_us - 10, **fields),
        transition(instance_id, 2, "scheduled", start_us, **fields),
    ]
    if end_us is not None:
        docs.append(transition(instance_id, 3, "stopped", end_us, **fields))
    return docs


def price(amount: str, spec_name: str | None = "h100x1", at_us: int = 0) -> PriceDoc:
    meter = "gpu_hour" if spec_name is not None else "storage_gb_month"
    return {
        "_id": f"{meter}:{spec_name or '*'}@{at_us}", "meter": meter, "spec_name": spec_name,
        "amount": amount, "effective_from": ledger.from_us(at_us), "effective_from_us": at_us,
    }  # fmt: skip


def sample(storage_id: str, at_us: int, bytes_used: int) -> SampleDoc:
    return {
        "_id": f"t-1/{storage_id}@{at_us}", "tenant_id": "t-1", "storage_id": storage_id,
        "kind": "volume", "bytes_used": bytes_used, "at_us": at_us,
    }  # fmt: skip


def health(node: str, at_us: int, state: str) -> HealthChangeDoc:
    return {"_id": f"{node}@{at_us}:{state}", "node": node, "health": state, "at_us": at_us}


def whole(gpu_us: Fraction) -> int:
    """Whole GPUs' time is a whole number of µs."""
    assert gpu_us.denominator == 1, gpu_us
    return gpu_us.numerator


def run_tally(
    transitions: list[TransitionDoc],
    group_by: GroupBy,
    *,
    samples: list[SampleDoc] | None = None,
    prices: list[PriceDoc] | None = None,
    faults: list[HealthChangeDoc] | None = None,
    start_us: int = T0,
    end_us: int = T0 + 48 * HOUR,
    now_us: int = T0 + 48 * HOUR,
) -> dict[str, Tally]:
    return tally(
        instances_from(transitions), samples or [], PriceBook(prices or [price("2.00")]),
        FaultBook(faults or []), start_us=start_us, end_us=end_us, now_us=now_us,
        group_by=group_by,
    )  # fmt: skip


# --- workloads from facts --------------------------------------------------------


def test_facts_are_grouped_by_tenant_and_workload_whatever_order_they_arrive_in() -> None:
    docs = [*ran("a", T0, T0 + HOUR), *ran("b", T0, None)]
    other_tenant = transition("a", 2, "scheduled", T0, tenant_id="t-2")
    facts = {
        (f.tenant_id, f.instance_id): f for f in instances_from([*reversed(docs), other_tenant])
    }
    assert set(facts) == {("t-1", "a"), ("t-1", "b"), ("t-2", "a")}
    assert [(i.start_us, i.end_us) for i in facts[("t-1", "a")].intervals] == [(T0, T0 + HOUR)]
    assert [(i.start_us, i.end_us) for i in facts[("t-1", "b")].intervals] == [(T0, None)]
    assert facts[("t-2", "a")].settled_through == 0  # its first transition is missing


def test_a_workload_takes_its_spec_and_owner_from_its_first_fact_and_zone_from_its_latest() -> None:
    docs = [
        transition("a", 1, "pending", T0, zone=None, user_id=None, gpu_count=4),
        transition("a", 2, "scheduled", T0 + 1, zone="zone-b", spec_name="other", gpu_count=1),
        transition("a", 3, "running", T0 + 2, zone=None),
    ]
    [facts] = instances_from(docs)
    assert (facts.spec_name, facts.user_id, facts.zone) == ("h100x1", "-", "zone-b")
    assert [i.gpus for i in facts.intervals] == [4]


def test_old_facts_without_owner_weight_or_zone_read_as_whole_gpus_of_nobody() -> None:
    docs = ran("a", T0, T0 + HOUR, zone=None, user_id=None)
    [facts] = instances_from(docs)
    assert (facts.zone, facts.user_id, facts.job_id, facts.service_id) == ("-", "-", "-", "-")
    assert facts.gpu_weight == 1
    assert facts.recorded_us == {1: T0 - 10, 2: T0, 3: T0 + HOUR}


def test_a_shared_gpu_units_weight_is_an_exact_fraction() -> None:
    [facts] = instances_from(ran("a", T0, T0 + HOUR, gpu_weight="3/7"))
    assert facts.gpu_weight == Fraction(3, 7)


def test_the_price_book_keeps_gpu_prices_per_spec_and_storage_prices_apart() -> None:
    book = PriceBook([price("2.00"), price("9.00", "a100x8", 5), price("0.10", None, 7)])
    assert book.gpu("h100x1") == [ledger.Price(0, Decimal("2.00"))]
    assert book.gpu("a100x8") == [ledger.Price(5, Decimal("9.00"))]
    assert book.gpu("unknown") == []
    assert book.storage() == [ledger.Price(7, Decimal("0.10"))]
    assert PriceBook([]).storage() == []


def test_the_fault_book_knows_each_nodes_quarantines_and_none_of_an_unknown_node() -> None:
    book = FaultBook(
        [
            health("n1", 10, "quarantined"),
            health("n2", 5, "quarantined"),
            health("n1", 20, "healthy"),
        ]
    )
    assert book.of("n1") == [(10, 20)]
    assert book.of("n2") == [(5, None)]
    assert book.of("n3") == []
    assert book.of(None) == []


# --- tallies ---------------------------------------------------------------------


def test_each_instance_is_its_own_row_priced_by_its_spec() -> None:
    docs = [*ran("a", T0, T0 + HOUR), *ran("b", T0, T0 + 2 * HOUR, spec_name="a100x8", gpu_count=8)]
    rows = run_tally(docs, "instance", prices=[price("2.00"), price("1.50", "a100x8")])
    assert {key: (whole(row.gpu_us), row.amount) for key, row in rows.items()} == {
        "a": (HOUR, Fraction("2.00")),
        "b": (16 * HOUR, Fraction("24.00")),
    }


@pytest.mark.parametrize(
    ("group_by", "keys"),
    [
        ("spec", {"h100x1", "a100x8"}),
        ("user", {"u-1", "u-2"}),
        ("gpu_type", {"NVIDIA-H100", "NVIDIA-A100"}),
        ("zone", {"zone-a", "zone-b"}),
        ("cluster", {"-", "local-2"}),  # not recorded: `-`
        ("region", {"-", "london"}),
        ("project", {"default", "vision"}),  # not recorded: from before projects, default
    ],
)
def test_rows_group_by_what_was_asked(group_by: GroupBy, keys: set[str]) -> None:
    docs = [
        *ran("a", T0, T0 + HOUR),
        *ran("b", T0, T0 + HOUR),
        *ran(
            "c", T0, T0 + HOUR, spec_name="a100x8", user_id="u-2", gpu_type="NVIDIA-A100",
            zone="zone-b", cluster="local-2", region="london", project="vision",
        ),
    ]  # fmt: skip
    rows = run_tally(docs, group_by)
    assert set(rows) == keys
    assert sorted(row.gpu_us for row in rows.values()) == [HOUR, 2 * HOUR]


def test_job_runs_share_their_jobs_row_and_instances_are_the_row_dash() -> None:
    docs = [
        *ran("train/r1", T0, T0 + HOUR, job_id="train"),
        *ran("train/r2", T0, T0 + HOUR, job_id="train"),
        *ran("nb", T0, T0 + HOUR),
        *ran("svc--chat/x1", T0, T0 + HOUR, service_id="chat"),
    ]
    assert {k: r.gpu_us for k, r in run_tally(docs, "job").items()} == {
        "train": 2 * HOUR,
        "-": 2 * HOUR,
    }
    assert {k: r.gpu_us for k, r in run_tally(docs, "service").items()} == {
        "chat": HOUR,
        "-": 3 * HOUR,
    }


def test_by_day_an_interval_over_midnight_counts_on_each_day() -> None:
    rows = run_tally(ran("a", T0 - HOUR, T0 + 2 * HOUR), "day", start_us=T0 - 24 * HOUR)
    assert {k: (whole(r.gpu_us), r.amount) for k, r in rows.items()} == {
        "2026-02-28": (HOUR, Fraction("2.00")),
        "2026-03-01": (2 * HOUR, Fraction("4.00")),
    }


def test_only_the_time_inside_the_range_is_counted() -> None:
    rows = run_tally(ran("a", T0, T0 + 10 * HOUR), "instance", start_us=T0 + 2 * HOUR,
                     end_us=T0 + 5 * HOUR)  # fmt: skip
    assert rows["a"].gpu_us == 3 * HOUR
    assert run_tally(ran("a", T0, T0 + HOUR), "instance", start_us=T0 + HOUR) == {}


def test_a_running_instance_is_counted_up_to_now() -> None:
    rows = run_tally(ran("a", T0, None), "instance", now_us=T0 + 90 * 60 * ledger.US_PER_S)
    assert rows["a"].gpu_us == HOUR + HOUR // 2
    assert rows["a"].amount == Decimal("3.00")


def test_time_on_a_quarantined_node_is_credited_in_its_own_column() -> None:
    faults = [health("n1", T0 + HOUR, "quarantined"), health("n1", T0 + 2 * HOUR, "healthy")]
    rows = run_tally(ran("a", T0, T0 + 3 * HOUR, gpu_count=2), "instance", faults=faults)
    assert (whole(rows["a"].gpu_us), whole(rows["a"].credited_gpu_us)) == (4 * HOUR, 2 * HOUR)
    assert rows["a"].amount == Decimal("8.00")
    # Another node's quarantine credits nothing here.
    other = [health("n9", T0, "quarantined")]
    rows = run_tally(ran("a", T0, T0 + 3 * HOUR), "instance", faults=other)
    assert rows["a"].credited_gpu_us == 0


def test_a_shared_units_time_counts_at_its_weight_and_is_priced_per_unit() -> None:
    """Two 1g MIG slices for an hour: 2/7 of a GPU-hour of GPU time, and two
    unit-hours at the slice's own price."""
    docs = ran("a", T0, T0 + HOUR, gpu_count=2, gpu_weight="1/7", spec_name="mig-1g")
    rows = run_tally(docs, "instance", prices=[price("0.50", "mig-1g")])
    assert rows["a"].gpu_us == Fraction(2 * HOUR, 7)
    assert rows["a"].slice_us == 2 * HOUR
    assert rows["a"].amount == Decimal("1.00")
    # Whole GPUs count no slice time.
    assert run_tally(ran("b", T0, T0 + HOUR), "instance")["b"].slice_us == 0


def test_gpu_time_before_its_specs_first_price_is_counted_but_costs_nothing() -> None:
    rows = run_tally(
        ran("a", T0, T0 + 2 * HOUR), "instance", prices=[price("2.00", at_us=T0 + HOUR)]
    )
    assert (whole(rows["a"].gpu_us), rows["a"].amount) == (2 * HOUR, Fraction("2.00"))


def test_storage_is_one_row_per_storage_by_instance_and_one_row_otherwise() -> None:
    samples = [sample("models", T0, 2 * GB), sample("data", T0, GB)]
    storage_price = price("0.73", None)
    by_instance = run_tally([], "instance", samples=samples, prices=[storage_price],
                            end_us=T0 + HOUR, now_us=T0 + HOUR)  # fmt: skip
    assert {k: (ledger.gb_hours(r.byte_us), r.amount) for k, r in by_instance.items()} == {
        "storage:models": (Decimal(2), Fraction("0.002")),
        "storage:data": (Decimal(1), Fraction("0.001")),
    }
    by_spec = run_tally([], "spec", samples=samples, prices=[storage_price],
                        end_us=T0 + HOUR, now_us=T0 + HOUR)  # fmt: skip
    assert {k: ledger.gb_hours(r.byte_us) for k, r in by_spec.items()} == {"storage": Decimal(3)}


def test_storage_by_day_shares_the_days_row_with_gpu_time() -> None:
    rows = run_tally(
        ran("a", T0, T0 + HOUR), "day", samples=[sample("s", T0 - HOUR, GB)],
        prices=[price("2.00"), price("0.73", None)], start_us=T0 - HOUR, end_us=T0 + HOUR,
    )  # fmt: skip
    assert {k: (whole(r.gpu_us), ledger.gb_hours(r.byte_us)) for k, r in rows.items()} == {
        "2026-02-28": (0, Decimal(1)),
        "2026-03-01": (HOUR, Decimal(1)),
    }
    assert rows["2026-03-01"].amount == Decimal("2.001")


# --- rows ------------------------------------------------------------------------


def test_tallies_add_column_by_column() -> None:
    total = Tally()
    total.add(Tally(Fraction(1, 2), Fraction(3), 4, 5, Fraction("0.25")))
    total.add(Tally(Fraction(1, 2), Fraction(1), 1, 1, Fraction("0.75")))
    assert total == Tally(Fraction(1), Fraction(4), 5, 6, Fraction("1.00"))


def test_a_row_rounds_weighted_time_down_to_the_microsecond_once() -> None:
    row = usage_row("a", Tally(gpu_us=Fraction(10, 7), credited_gpu_us=Fraction(20, 3),
                               slice_us=10, byte_us=GB * HOUR, amount=Fraction("1.2345")))  # fmt: skip
    assert (row.key, row.gpu_microseconds, row.credited_gpu_microseconds) == ("a", 1, 6)
    assert row.gpu_seconds == pytest.approx(10 / 7 / 1e6)
    assert (row.slice_microseconds, row.storage_gb_hours, row.amount) == (
        10,
        Decimal(1),
        Decimal("1.2345"),
    )


def test_a_row_in_json_carries_money_exactly_and_names_in_camel_case() -> None:
    row = usage_row("a", Tally(gpu_us=Fraction(HOUR), amount=Fraction("0.000000001")))
    body = row.model_dump(mode="json", by_alias=True)
    assert body["gpuMicroseconds"] == HOUR
    assert body["gpuSeconds"] == 3600.0
    assert Decimal(body["amount"]) == Decimal("0.000000001")
