"""Metering domain logic: recording facts from events, and deriving usage, money,
invoices and budget notices from them (see ledger.py for the billing rules)."""

from __future__ import annotations

import csv
import io
import logging
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from faststream.kafka import KafkaBroker

from gpucloud_libs.clock import now
from gpucloud_libs.errors import Conflict, Forbidden, NotFound, ValidationFailed
from gpucloud_libs.events import (
    BudgetThresholdCrossed,
    InstanceStateChanged,
    NodeHealthChanged,
    StopTenantInstancesRequested,
    StorageUsageSampled,
    TenantDeleted,
    TenantUpserted,
    UsageRecorded,
)
from gpucloud_libs.identity import Identity
from gpucloud_libs.kafka import publish_event
from gpucloud_libs.mongo import Document
from gpucloud_libs.outbox import PublishRetries
from gpucloud_libs.topics import BILLING_ALERTS, INSTANCE_COMMANDS, USAGE

from . import ledger
from .ledger import FaultWindow, HealthChange, Interval, Price, Sample, Transition
from .schemas import (
    Budget,
    BudgetSet,
    GroupBy,
    Invoice,
    InvoiceLine,
    PriceCreate,
    UsageReport,
    UsageRow,
)
from .schemas import Price as PriceView
from .store import BudgetStore, FactStore, InvoiceStore, PriceStore, UsageRecordStore

log = logging.getLogger(__name__)


@dataclass
class _Tally:
    gpu_us: int = 0
    credited_gpu_us: int = 0
    byte_us: int = 0
    amount: Decimal = field(default_factory=Decimal)

    def add(self, other: _Tally) -> None:
        self.gpu_us += other.gpu_us
        self.credited_gpu_us += other.credited_gpu_us
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


class ChangeSet:
    """Keys (tenant, instance or storage) that got new facts since the last pass.
    None until the first pass, which looks at everything."""

    def __init__(self) -> None:
        self._keys: set[tuple[str, str]] | None = None

    def add(self, *keys: tuple[str, str]) -> None:
        if self._keys is not None:
            self._keys.update(keys)

    def take(self) -> set[tuple[str, str]] | None:
        """The changes to look at now (None: everything); tracking starts afresh."""
        taken, self._keys = self._keys, set()
        return taken

    def give_back(self, keys: set[tuple[str, str]] | None) -> None:
        """A pass failed: look at its keys again next time (everything, if it was full)."""
        if keys is None or self._keys is None:
            self._keys = None
        else:
            self._keys |= keys


def _by_tenant(keys: set[tuple[str, str]]) -> dict[str, set[str]]:
    """(tenant, instance or storage) keys as each tenant's set of ids."""
    grouped: dict[str, set[str]] = defaultdict(set)
    for tenant_id, subject_id in keys:
        grouped[tenant_id].add(subject_id)
    return grouped


def instances_from(transitions: Iterable[Document]) -> list[InstanceFacts]:
    grouped: dict[tuple[str, str], list[Document]] = defaultdict(list)
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
            )
        )
    return facts


class PriceBook:
    def __init__(self, documents: list[Document]) -> None:
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

    def __init__(self, documents: list[Document]) -> None:
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
        "gpu_type": instance.gpu_type,
        "zone": instance.zone,
        "day": "",
    }[group_by]


def tally(
    instances: list[InstanceFacts],
    samples: list[Document],
    prices: PriceBook,
    faults: FaultBook,
    *,
    start_us: int,
    end_us: int,
    now_us: int,
    group_by: GroupBy,
) -> dict[str, _Tally]:
    """Usage and exact amounts in [start, end), per group."""
    rows: dict[str, _Tally] = defaultdict(_Tally)
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
                    if use.credited:
                        rows[key].credited_gpu_us += use.gpu_us
                    else:
                        rows[key].gpu_us += use.gpu_us
                        rows[key].amount += use.amount
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


def _row(key: str, tallied: _Tally) -> UsageRow:
    return UsageRow(
        key=key,
        gpu_microseconds=tallied.gpu_us,
        gpu_seconds=tallied.gpu_us / ledger.US_PER_S,
        credited_gpu_microseconds=tallied.credited_gpu_us,
        storage_gb_hours=ledger.gb_hours(tallied.byte_us),
        amount=tallied.amount,
    )


class MeteringService:
    def __init__(
        self,
        facts: FactStore,
        prices: PriceStore,
        budgets: BudgetStore,
        usage_records: UsageRecordStore,
        invoices: InvoiceStore,
        broker: KafkaBroker,
        *,
        source: str,
        usage_settle_s: float = 30.0,
    ) -> None:
        self.facts = facts
        self.prices = prices
        self.budgets = budgets
        self.usage_records = usage_records
        self.invoices = invoices
        self.broker = broker
        self.source = source
        self.usage_settle_us = int(usage_settle_s * ledger.US_PER_S)
        #: Instances and storages with facts recorded since the last usage-record pass.
        self._changed_instances = ChangeSet()
        self._changed_storages = ChangeSet()
        #: Per storage: usage records are claimed for every hour before this (µs).
        self._storage_hours_done: dict[tuple[str, str], int] = {}
        self._notice_retries = PublishRetries()
        self._usage_retries = PublishRetries()

    # --- facts from events -----------------------------------------------------------

    @staticmethod
    def transition_document(event_id: str, data: InstanceStateChanged) -> Document:
        return {
            "_id": f"{data.tenant_id}/{data.instance_id}#{data.sequence}",
            "event_id": event_id,
            "tenant_id": data.tenant_id,
            "instance_id": data.instance_id,
            "sequence": data.sequence,
            "state": data.state,
            "at_us": ledger.to_us(data.at),
            "spec_name": data.spec_name,
            "gpu_type": data.gpu_type,
            "gpu_count": data.gpu_count,
            "zone": data.zone,
            "node": data.node,
            "user_id": data.user_id,
            "recorded_us": ledger.to_us(now()),
        }

    async def record_transitions(self, events: list[tuple[str, InstanceStateChanged]]) -> None:
        """Record lifecycle transitions (event id, data); a repeat is a no-op."""
        documents = [self.transition_document(event_id, data) for event_id, data in events]
        self._changed_instances.add(*((data.tenant_id, data.instance_id) for _, data in events))
        for repeat, kept in await self.facts.record_transitions(documents):
            if (kept["state"], kept["at_us"]) != (repeat["state"], repeat["at_us"]):
                # Same instance and sequence, a different fact: the first one stays billed.
                log.error(
                    "conflicting transition ignored",
                    extra={"transition": repeat["_id"], "kept_event": kept.get("event_id"),
                           "ignored_event": repeat["event_id"]},
                )  # fmt: skip

    async def record_sample(self, data: StorageUsageSampled) -> None:
        at_us = ledger.to_us(data.at)
        key = (data.tenant_id, data.storage_id)
        if at_us - at_us % ledger.US_PER_HOUR > self._storage_hours_done.get(key, -1):
            self._changed_storages.add(key)  # it may close an hour
        await self.facts.record_sample(
            {
                # Storage ids are unique per tenant, like instance ids.
                "_id": f"{data.tenant_id}/{data.storage_id}@{at_us}",
                "tenant_id": data.tenant_id,
                "storage_id": data.storage_id,
                "kind": data.kind,
                "bytes_used": data.bytes_used,
                "at_us": at_us,
            }
        )

    async def record_health(self, data: NodeHealthChanged) -> None:
        """A node's health change: the quarantines in them are credited, not billed."""
        at_us = ledger.to_us(data.at)
        await self.facts.record_health(
            {"_id": f"{data.node}@{at_us}:{data.health}", "node": data.node,
             "health": data.health, "at_us": at_us}
        )  # fmt: skip

    async def apply_tenant(self, data: TenantUpserted | TenantDeleted) -> None:
        cap = data.quota.monthly_spend_cap_cents if isinstance(data, TenantUpserted) else None
        await self.budgets.set_cap(data.tenant_id, cap)

    # --- prices --------------------------------------------------------------------

    async def add_price(self, body: PriceCreate) -> PriceView:
        at = now()
        effective = body.effective_from or at
        if effective < at.replace(microsecond=0):
            raise ValidationFailed(
                "effectiveFrom is in the past: a price never re-prices used time"
            )
        if (body.meter == "gpu_hour") != (body.spec_name is not None):
            raise ValidationFailed("a gpu_hour price names its specName; a storage price does not")
        effective_us = ledger.to_us(effective)
        document = {
            "_id": f"{body.meter}:{body.spec_name or '*'}@{effective_us}",
            "meter": body.meter,
            "spec_name": body.spec_name,
            "amount": str(body.amount),
            "effective_from": effective,
            "effective_from_us": effective_us,
        }
        if not await self.prices.add(document):
            raise Conflict("a price for this meter already takes effect at that moment")
        return self._price_view(document)

    @staticmethod
    def _price_view(doc: Document) -> PriceView:
        return PriceView(
            meter=doc["meter"], spec_name=doc.get("spec_name"), amount=Decimal(doc["amount"]),
            effective_from=ledger.from_us(doc["effective_from_us"]),
        )  # fmt: skip

    async def list_prices(self) -> list[PriceView]:
        return [self._price_view(doc) for doc in await self.prices.all()]

    # --- usage ---------------------------------------------------------------------

    @staticmethod
    def scope(identity: Identity, tenant_id: str | None) -> str | None:
        """The tenant a read covers: the caller's own, or any (or all) for a platform admin."""
        if identity.is_platform_admin:
            return tenant_id
        if identity.role != "tenant-admin":
            raise Forbidden("usage and billing are for tenant admins")
        return identity.require_tenant()

    async def report(
        self, tenant_id: str | None, start: datetime, end: datetime, group_by: GroupBy,
        *, instance_id: str | None = None,
    ) -> UsageReport:  # fmt: skip
        if end <= start:
            raise ValidationFailed("`end` must be after `start`")
        as_of = now()
        if instance_id is None:
            transitions = await self.facts.transitions(tenant_id)
        else:
            if tenant_id is None:
                raise ValidationFailed("an instance's usage is read within its tenant")
            transitions = await self.facts.transitions_of(tenant_id, {instance_id})
            if not transitions:
                raise NotFound(f"no usage for instance {instance_id!r}")
        samples = [] if instance_id is not None else await self.facts.samples(tenant_id)
        rows = tally(
            instances_from(transitions), samples, PriceBook(await self.prices.all()),
            FaultBook(await self.facts.health()), start_us=ledger.to_us(start), end_us=ledger.to_us(end), now_us=ledger.to_us(as_of),
            group_by=group_by,
        )  # fmt: skip
        total = _Tally()
        for tallied in rows.values():
            total.add(tallied)
        return UsageReport(
            tenant_id=tenant_id, start=start, end=end, group_by=group_by,
            rows=[_row(key, rows[key]) for key in sorted(rows)], total=_row("total", total),
            as_of=as_of,
        )  # fmt: skip

    @staticmethod
    def as_csv(report: UsageReport) -> str:
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow([report.group_by, "gpu_seconds", "gpu_microseconds",
                         "credited_gpu_microseconds", "storage_gb_hours", "amount"])  # fmt: skip
        for row in [*report.rows, report.total]:
            writer.writerow([row.key, f"{row.gpu_microseconds / ledger.US_PER_S:.6f}",
                             row.gpu_microseconds, row.credited_gpu_microseconds,
                             row.storage_gb_hours, row.amount])  # fmt: skip
        return out.getvalue()

    # --- invoices ------------------------------------------------------------------

    async def draft_invoice(self, tenant_id: str, period: str) -> Invoice:
        """The invoice of a month, computed from the facts: the same facts, the same invoice."""
        start_us, end_us = ledger.month_bounds(period)
        prices = PriceBook(await self.prices.all())
        faults = FaultBook(await self.facts.health())
        lines: list[InvoiceLine] = []
        instances = instances_from(await self.facts.transitions(tenant_id))
        for spec_name in sorted({instance.spec_name for instance in instances}):
            # price -> [billed, credited] GPU-µs
            gpu_us_by_price: dict[Decimal | None, list[int]] = defaultdict(lambda: [0, 0])
            for instance in (i for i in instances if i.spec_name == spec_name):
                for interval in instance.intervals:
                    clipped = interval.clip(start_us, end_us, end_us)
                    if clipped is None:
                        continue
                    for use in ledger.gpu_use(
                        *clipped, interval.gpus, prices.gpu(spec_name), faults.of(interval.node)
                    ):
                        gpu_us_by_price[use.price][1 if use.credited else 0] += use.gpu_us
            for price, (billed, credited) in sorted(
                gpu_us_by_price.items(), key=lambda kv: kv[0] or Decimal(0)
            ):
                lines.append(
                    InvoiceLine(
                        description=f"{spec_name}: GPU-hours",
                        meter="gpu_hour",
                        spec_name=spec_name,
                        quantity=Decimal(billed) / ledger.US_PER_HOUR,
                        credited_quantity=Decimal(credited) / ledger.US_PER_HOUR,
                        unit_price=price,
                        amount_cents=ledger.cents(ledger.gpu_amount(billed, price)),
                    )
                )
        storage = tally([], await self.facts.samples(tenant_id), prices, faults,
                        start_us=start_us, end_us=end_us, now_us=end_us, group_by="spec")  # fmt: skip
        if storage:
            byte_us = sum(t.byte_us for t in storage.values())
            lines.append(
                InvoiceLine(
                    description="Storage: GB-months",
                    meter="storage_gb_month",
                    quantity=Decimal(byte_us)
                    / (ledger.BYTES_PER_GB * ledger.US_PER_HOUR * ledger.HOURS_PER_MONTH),
                    unit_price=None,
                    amount_cents=ledger.cents(
                        sum((t.amount for t in storage.values()), Decimal(0))
                    ),
                )
            )
        return Invoice(
            invoice_id=f"inv-{tenant_id}-{period}", tenant_id=tenant_id, period=period, lines=lines,
            total_cents=sum(line.amount_cents for line in lines), status="draft",
        )  # fmt: skip

    async def issue_invoice(self, tenant_id: str, period: str) -> tuple[Invoice, bool]:
        _, end_us = ledger.month_bounds(period)
        if ledger.to_us(now()) < end_us:
            raise Conflict(f"{period} has not ended; an invoice is issued once its month is over")
        existing = await self.invoices.get(f"inv-{tenant_id}-{period}")
        if existing is not None:
            return Invoice.model_validate(existing["invoice"]), False
        draft = await self.draft_invoice(tenant_id, period)
        issued = draft.model_copy(update={"status": "issued", "issued_at": now()})
        document = {
            "_id": issued.invoice_id, "tenant_id": tenant_id, "period": period,
            "invoice": issued.model_dump(mode="json", by_alias=True),
        }  # fmt: skip
        if not await self.invoices.issue(document):
            raced = await self.invoices.get(issued.invoice_id)
            assert raced is not None
            return Invoice.model_validate(raced["invoice"]), False
        return issued, True

    async def get_invoice(self, tenant_id: str | None, invoice_id: str) -> Invoice:
        doc = await self.invoices.get(invoice_id)
        if doc is None or (tenant_id is not None and doc["tenant_id"] != tenant_id):
            raise NotFound(f"invoice {invoice_id!r} does not exist")
        return Invoice.model_validate(doc["invoice"])

    async def list_invoices(self, tenant_id: str | None) -> list[Invoice]:
        return [
            Invoice.model_validate(doc["invoice"])
            for doc in await self.invoices.of_tenant(tenant_id)
        ]

    # --- budgets -------------------------------------------------------------------

    async def set_budget(self, tenant_id: str, body: BudgetSet) -> Budget:
        await self.budgets.put(tenant_id, body.model_dump())
        return await self.get_budget(tenant_id)

    async def month_to_date_cents(
        self, tenant_id: str, at: datetime, prices: PriceBook, faults: FaultBook
    ) -> int:
        start_us, end_us = ledger.month_bounds(ledger.period_of(at))
        rows = tally(
            instances_from(await self.facts.transitions(tenant_id)),
            await self.facts.samples(tenant_id), prices, faults,
            start_us=start_us, end_us=end_us, now_us=ledger.to_us(at), group_by="spec",
        )  # fmt: skip
        return ledger.cents(sum((t.amount for t in rows.values()), Decimal(0)))

    async def get_budget(self, tenant_id: str) -> Budget:
        doc = await self.budgets.get(tenant_id)
        if doc is None:
            raise NotFound("no budget is set for this tenant")
        at = now()
        spent = await self.month_to_date_cents(
            tenant_id, at, PriceBook(await self.prices.all()), FaultBook(await self.facts.health())
        )
        return Budget(
            tenant_id=tenant_id, period=ledger.period_of(at), spent_cents=spent,
            monthly_budget_cents=doc["monthly_budget_cents"], thresholds=doc["thresholds"],
            hard_stop=doc["hard_stop"],
            crossed=ledger.crossed(spent, doc["monthly_budget_cents"], doc["thresholds"]),
        )  # fmt: skip

    async def evaluate_budgets(self) -> None:
        """Publish each threshold crossed, once per tenant, period and threshold; and
        ask for a stop at a hard budget or at the tenant's spend cap."""
        at = now()
        period = ledger.period_of(at)
        caps = await self.budgets.caps()
        budgets = {doc["_id"]: doc for doc in await self.budgets.all()}
        # Once per round, not per tenant.
        prices = PriceBook(await self.prices.all())
        faults = FaultBook(await self.facts.health())
        for tenant_id in sorted(set(caps) | set(budgets)):
            spent = await self.month_to_date_cents(tenant_id, at, prices, faults)
            budget = budgets.get(tenant_id)
            stop_reason = None
            if budget is not None:
                limit = budget["monthly_budget_cents"]
                for threshold in ledger.crossed(spent, limit, budget["thresholds"]):
                    await self._notify(tenant_id, period, threshold, spent, limit)
                if budget["hard_stop"] and spent >= limit:
                    stop_reason = f"monthly budget of {limit} cents reached"
            if tenant_id in caps and spent >= caps[tenant_id]:
                stop_reason = f"monthly spend cap of {caps[tenant_id]} cents reached"
            if stop_reason:
                await self._stop(tenant_id, period, stop_reason)

    async def _notify(
        self, tenant_id: str, period: str, threshold: int, spent: int, limit: int
    ) -> None:
        notice = {"_id": f"{tenant_id}:{period}:{threshold}", "kind": "threshold", "tenant_id": tenant_id,
                  "period": period, "threshold": threshold, "spent_cents": spent, "budget_cents": limit}  # fmt: skip
        if await self.budgets.claim_notice(notice):
            await self._publish_notice(notice)

    async def _stop(self, tenant_id: str, period: str, reason: str) -> None:
        notice = {"_id": f"{tenant_id}:{period}:stop", "kind": "stop", "tenant_id": tenant_id,
                  "period": period, "reason": reason}  # fmt: skip
        if await self.budgets.claim_notice(notice):
            await self._publish_notice(notice)

    async def _publish_notice(self, notice: Document) -> None:
        try:
            await self._send_notice(notice)
        except Exception:
            self._notice_retries.failed(notice["_id"])
            raise
        await self.budgets.mark_published(notice["_id"])

    async def _send_notice(self, notice: Document) -> None:
        if notice["kind"] == "threshold":
            await publish_event(
                self.broker, BILLING_ALERTS,
                BudgetThresholdCrossed(
                    tenant_id=notice["tenant_id"], period=notice["period"],
                    threshold_pct=notice["threshold"], spent_cents=notice["spent_cents"],
                    budget_cents=notice["budget_cents"],
                ),
                source=self.source, event_id=notice["_id"],
            )  # fmt: skip
        else:
            await publish_event(
                self.broker, INSTANCE_COMMANDS,
                StopTenantInstancesRequested(tenant_id=notice["tenant_id"], reason=notice["reason"]),
                source=self.source, event_id=notice["_id"],
            )  # fmt: skip

    # --- usage out -----------------------------------------------------------------

    async def publish_usage_records(self) -> int:
        """Every final GPU interval and storage hour, priced, as a usage record; once each.

        The first pass after a start looks at every instance and storage; later
        passes only at those with new facts since (or an interval still settling).
        """
        instances, storages = self._changed_instances.take(), self._changed_storages.take()
        try:
            # A full pass skips what earlier runs of the service already claimed.
            known = (
                await self.usage_records.known_ids()
                if instances is None or storages is None
                else set()
            )
            published = await self._publish_final_intervals(instances, known)
        except Exception:
            self._changed_instances.give_back(instances)
            self._changed_storages.give_back(storages)
            raise
        try:
            return published + await self._publish_final_storage_hours(storages, known)
        except Exception:
            self._changed_storages.give_back(storages)
            raise

    async def _publish_final_intervals(
        self, only: set[tuple[str, str]] | None, known: set[str]
    ) -> int:
        """An interval is final once it is closed, every transition up to the closing
        one is recorded (a late one could still move its end), and the closing one
        was recorded `usage_settle_s` ago (a node health change published around the
        same moment could still credit part of it)."""
        if only is None:
            transitions = await self.facts.transitions(None)
        else:
            transitions = [
                doc
                for tenant_id, instance_ids in _by_tenant(only).items()
                for doc in await self.facts.transitions_of(tenant_id, instance_ids)
            ]
        prices = PriceBook(await self.prices.all())
        faults = FaultBook(await self.facts.health())
        settled_before = ledger.to_us(now()) - self.usage_settle_us
        published = 0
        for instance in instances_from(transitions):
            for interval in instance.intervals:
                if interval.end_us is None or (interval.closed_by or 0) > instance.settled_through:
                    continue
                usage_id = f"{instance.tenant_id}/{instance.instance_id}#{interval.opened_by}"
                if usage_id in known:
                    continue
                assert interval.closed_by is not None
                if instance.recorded_us[interval.closed_by] > settled_before:
                    self._changed_instances.add((instance.tenant_id, instance.instance_id))
                    continue
                uses = list(ledger.gpu_use(
                    interval.start_us, interval.end_us, interval.gpus,
                    prices.gpu(instance.spec_name), faults.of(interval.node),
                ))  # fmt: skip
                record = {
                    "_id": usage_id, "tenant_id": instance.tenant_id,
                    "subject_id": instance.instance_id, "meter": "gpu_seconds",
                    "quantity": sum(u.gpu_us for u in uses if not u.credited) / ledger.US_PER_S,
                    "credited_quantity": sum(u.gpu_us for u in uses if u.credited) / ledger.US_PER_S,
                    "start_us": interval.start_us, "end_us": interval.end_us,
                    "amount_cents": float(sum((u.amount for u in uses), Decimal(0)) * 100),
                }  # fmt: skip
                if await self.usage_records.claim(record):
                    await self._publish_usage(record)
                    published += 1
        return published

    async def _publish_final_storage_hours(
        self, only: set[tuple[str, str]] | None, known: set[str]
    ) -> int:
        """A storage's usage per UTC hour goes out once a sample at or after the hour's
        end is recorded (the storage service samples every minute, and sends 0 when
        a storage is deleted); hours with nothing stored send nothing."""
        if only is None:
            samples = await self.facts.samples(None)
        else:
            samples = [
                doc
                for tenant_id, storage_ids in _by_tenant(only).items()
                for doc in await self.facts.samples_of(tenant_id, storage_ids)
            ]
        by_storage: dict[tuple[str, str], list[Sample]] = defaultdict(list)
        for doc in samples:
            by_storage[(doc["tenant_id"], doc["storage_id"])].append(
                Sample(doc["at_us"], doc["bytes_used"])
            )
        prices = PriceBook(await self.prices.all()).storage()
        published = 0
        for (tenant_id, storage_id), found in by_storage.items():
            done = self._storage_hours_done.get((tenant_id, storage_id), 0)
            for hour, byte_us, amount in ledger.final_storage_hours(found, prices):
                usage_id = f"{tenant_id}/{storage_id}@{hour}"
                if hour < done or usage_id in known:
                    continue
                record = {
                    "_id": usage_id, "tenant_id": tenant_id, "subject_id": storage_id,
                    "meter": "storage_gb_hours", "quantity": float(ledger.gb_hours(byte_us)),
                    "start_us": hour, "end_us": hour + ledger.US_PER_HOUR,
                    "amount_cents": float(amount * 100),
                }  # fmt: skip
                if await self.usage_records.claim(record):
                    await self._publish_usage(record)
                    published += 1
            closed_at = max(sample.at_us for sample in found)
            self._storage_hours_done[(tenant_id, storage_id)] = (
                closed_at - closed_at % ledger.US_PER_HOUR
            )
        return published

    async def _publish_usage(self, record: Document) -> None:
        try:
            await self._send_usage(record)
        except Exception:
            self._usage_retries.failed(record["_id"])
            raise
        await self.usage_records.mark_published(record["_id"])

    async def _send_usage(self, record: Document) -> None:
        await publish_event(
            self.broker, USAGE,
            UsageRecorded(
                usage_id=record["_id"], tenant_id=record["tenant_id"], subject_id=record["subject_id"],
                meter=record["meter"], quantity=record["quantity"],
                credited_quantity=record.get("credited_quantity", 0.0),
                start=ledger.from_us(record["start_us"]), end=ledger.from_us(record["end_us"]),
                amount_cents=record["amount_cents"],
            ),
            source=self.source, event_id=record["_id"],
        )  # fmt: skip

    async def sweep_outbox(self) -> None:
        """Notices and usage records claimed but not yet published (Kafka was away)."""
        await self._notice_retries.sweep(
            all_unpublished=self.budgets.unpublished, get=self.budgets.notice,
            publish=self._publish_notice,
        )  # fmt: skip
        await self._usage_retries.sweep(
            all_unpublished=self.usage_records.unpublished, get=self.usage_records.get,
            publish=self._publish_usage,
        )  # fmt: skip
