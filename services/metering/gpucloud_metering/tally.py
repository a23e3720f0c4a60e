"""Usage and money from recorded facts: the pure reading of the ledger over many instances.

ledger.py holds the billing rules for one interval or storage; this module
groups facts into instances, prices them by spec and date, credits quarantined
nodes, and sums per report group. No I/O: every capability that reads usage
(reports, invoices, budgets, usage records) hands it the facts it loaded.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction

from . import ledger
from .documents import HealthChangeDoc, PriceDoc, SampleDoc, TransitionDoc
from .ledger import FaultWindow, HealthChange, Interval, Price, Sample, Transition
from .schemas import GroupBy, UsageRow


@dataclass
class Tally:
    #: GPU time at each unit's weight: a MIG slice of 1/7 counts a seventh. Exact.
    gpu_us: Fraction = field(default_factory=Fraction)
    credited_gpu_us: Fraction = field(default_factory=Fraction)
    #: Time on shared-GPU units, unweighted: what their per-unit-hour price multiplies.
    slice_us: int = 0
    byte_us: int = 0
    #: Exact (ledger.py).
    amount: Fraction = field(default_factory=Fraction)

    def add(self, other: Tally) -> None:
        self.gpu_us += other.gpu_us
        self.credited_gpu_us += other.credited_gpu_us
        self.slice_us += other.slice_us
        self.byte_us += other.byte_us
        self.amount += other.amount


@dataclass(frozen=True)
class InstanceFacts:
    """One instance's billable history, from its recorded transitions."""

    tenant_id: str
    instance_id: str
    spec_name: str
    gpu_type: str
    zone: str
    user_id: str
    intervals: list[Interval]
    #: Transitions 1..this are all recorded: intervals closed by then are final.
    settled_through: int
    #: When metering recorded each transition (µs, its own clock), by sequence.
    recorded_us: dict[int, int]
    #: The job whose run this is; `-` for an instance.
    job_id: str = "-"
    #: The inference service whose replica this is; `-` otherwise.
    service_id: str = "-"
    #: The part of a GPU one of its units is (shared GPUs); 1 for whole GPUs.
    gpu_weight: Fraction = Fraction(1)
    #: The cluster it ran in and its region; `-` where not recorded.
    cluster: str = "-"
    region: str = "-"
    #: The tenant's project it ran in (`default` for facts from before projects).
    project: str = "default"


def instances_from(transitions: Iterable[TransitionDoc]) -> list[InstanceFacts]:
    grouped: dict[tuple[str, str], list[TransitionDoc]] = defaultdict(list)
    for doc in transitions:
        grouped[(doc["tenant_id"], doc["instance_id"])].append(doc)
    facts = []
    for (tenant_id, instance_id), docs in grouped.items():
        first = min(docs, key=lambda d: d["sequence"])
        located = next(
            (d for d in sorted(docs, key=lambda d: -d["sequence"]) if d.get("zone")), first
        )
        intervals = ledger.billable_intervals(
            (Transition(d["sequence"], d["state"], d["at_us"], d.get("node")) for d in docs),
            first["gpu_count"],
        )
        facts.append(
            InstanceFacts(
                tenant_id,
                instance_id,
                first["spec_name"],
                first["gpu_type"],
                located.get("zone") or "-",
                first.get("user_id") or "-",
                intervals,
                ledger.contiguous_through(d["sequence"] for d in docs),
                {d["sequence"]: d.get("recorded_us", 0) for d in docs},
                first.get("job_id") or "-",
                first.get("service_id") or "-",
                Fraction(first.get("gpu_weight") or 1),
                first.get("cluster") or "-",
                first.get("region") or "-",
                first.get("project") or "default",
            )
        )
    return facts


class PriceBook:
    def __init__(self, documents: list[PriceDoc]) -> None:
        self._prices: dict[tuple[str, str | None], list[Price]] = defaultdict(list)
        for doc in documents:
            self._prices[(doc["meter"], doc.get("spec_name"))].append(
                Price(doc["effective_from_us"], Decimal(doc["amount"]))
            )

    def gpu(self, spec_name: str) -> list[Price]:
        return self._prices.get(("gpu_hour", spec_name), [])

    def storage(self) -> list[Price]:
        return self._prices.get(("storage_gb_month", None), [])


class FaultBook:
    """Each node's quarantines, from the recorded health changes."""

    def __init__(self, documents: list[HealthChangeDoc]) -> None:
        changes: dict[str, list[HealthChange]] = defaultdict(list)
        for doc in documents:
            changes[doc["node"]].append(HealthChange(doc["at_us"], doc["health"]))
        self._windows = {node: ledger.fault_windows(found) for node, found in changes.items()}

    def of(self, node: str | None) -> list[FaultWindow]:
        return self._windows.get(node, []) if node is not None else []


def _group_key(instance: InstanceFacts, group_by: GroupBy) -> str:
    return {
        "instance": instance.instance_id,
        "spec": instance.spec_name,
        "user": instance.user_id,
        "project": instance.project,
        "gpu_type": instance.gpu_type,
        "zone": instance.zone,
        "cluster": instance.cluster,
        "region": instance.region,
        "job": instance.job_id,
        "service": instance.service_id,
        "day": "",
    }[group_by]


def tally(
    instances: list[InstanceFacts],
    samples: list[SampleDoc],
    prices: PriceBook,
    faults: FaultBook,
    *,
    start_us: int,
    end_us: int,
    now_us: int,
    group_by: GroupBy,
) -> dict[str, Tally]:
    """Usage and exact amounts in [start, end), per group."""
    rows: dict[str, Tally] = defaultdict(Tally)
    for instance in instances:
        for interval in instance.intervals:
            clipped = interval.clip(start_us, end_us, now_us)
            if clipped is None:
                continue
            pieces = (
                ledger.split_by_day(*clipped)
                if group_by == "day"
                else [(_group_key(instance, group_by), *clipped)]
            )
            for key, piece_start, piece_end in pieces:
                for use in ledger.gpu_use(
                    piece_start, piece_end, interval.gpus, prices.gpu(instance.spec_name),
                    faults.of(interval.node),
                ):  # fmt: skip
                    # `use.gpu_us` counts units, as the price does; reports weigh them.
                    weighted = use.gpu_us * instance.gpu_weight
                    if use.credited:
                        rows[key].credited_gpu_us += weighted
                        continue
                    rows[key].gpu_us += weighted
                    rows[key].amount += use.amount
                    if instance.gpu_weight != 1:
                        rows[key].slice_us += use.gpu_us
    by_storage: dict[str, list[Sample]] = defaultdict(list)
    for doc in samples:
        by_storage[doc["storage_id"]].append(Sample(doc["at_us"], doc["bytes_used"]))
    for storage_id, storage_samples in by_storage.items():
        for step_start, step_end, size in ledger.storage_steps(storage_samples, now_us):
            begin, stop = max(step_start, start_us), min(step_end, end_us)
            if stop <= begin:
                continue
            pieces = (
                ledger.split_by_day(begin, stop)
                if group_by == "day"
                else [
                    (f"storage:{storage_id}" if group_by == "instance" else "storage", begin, stop)
                ]
            )
            for key, piece_start, piece_end in pieces:
                byte_us, amount = ledger.storage_cost(
                    piece_start, piece_end, size, prices.storage()
                )
                rows[key].byte_us += byte_us
                rows[key].amount += amount
    return rows


def usage_row(key: str, tallied: Tally) -> UsageRow:
    return UsageRow(
        key=key,
        gpu_microseconds=math.floor(tallied.gpu_us),
        gpu_seconds=float(tallied.gpu_us / ledger.US_PER_S),
        credited_gpu_microseconds=math.floor(tallied.credited_gpu_us),
        slice_microseconds=tallied.slice_us,
        storage_gb_hours=ledger.gb_hours(tallied.byte_us),
        amount=ledger.as_decimal(tallied.amount),
    )
