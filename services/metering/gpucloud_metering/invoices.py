"""Invoices: a month's lines per spec and price, drafted from the facts, issued once and immutable."""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal
from fractions import Fraction

from gpucloud_libs.clock import now
from gpucloud_libs.errors import Conflict, NotFound
from gpucloud_libs.naming import DEFAULT_PROJECT

from . import ledger
from .documents import InvoiceDoc
from .prices import Prices
from .schemas import Invoice, InvoiceLine
from .store import FactStore, InvoiceStore
from .tally import FaultBook, InstanceFacts, instances_from, tally


class Invoices:
    def __init__(self, facts: FactStore, prices: Prices, invoices: InvoiceStore) -> None:
        self._facts = facts
        self._prices = prices
        self._invoices = invoices

    async def draft(self, tenant_id: str, period: str) -> Invoice:
        """The invoice of a month, computed from the facts: the same facts, the same invoice."""
        start_us, end_us = ledger.month_bounds(period)
        prices = await self._prices.book()
        faults = FaultBook(await self._facts.health())
        lines: list[InvoiceLine] = []
        instances = instances_from(await self._facts.transitions(tenant_id))
        # A line per project, spec and price: a project's lines add up to what its
        # usage report says (decision 138), and a tenant without projects reads as before.
        by_line: defaultdict[tuple[str, str], list[InstanceFacts]] = defaultdict(list)
        for instance in instances:
            by_line[instance.project, instance.spec_name].append(instance)
        for project, spec_name in sorted(by_line, key=_line_order):
            # price -> [billed, credited] GPU-µs
            gpu_us_by_price: dict[Decimal | None, list[int]] = defaultdict(lambda: [0, 0])
            for instance in by_line[project, spec_name]:
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
                        description=f"{spec_name}: GPU-hours"
                        + ("" if project == DEFAULT_PROJECT else f", project {project}"),
                        meter="gpu_hour",
                        spec_name=spec_name,
                        project=project,
                        quantity=Decimal(billed) / ledger.US_PER_HOUR,
                        credited_quantity=Decimal(credited) / ledger.US_PER_HOUR,
                        unit_price=price,
                        amount_cents=ledger.cents(ledger.gpu_amount(billed, price)),
                    )
                )
        storage = tally([], await self._facts.samples(tenant_id), prices, faults,
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
                        sum((t.amount for t in storage.values()), Fraction(0))
                    ),
                )
            )
        return Invoice(
            invoice_id=f"inv-{tenant_id}-{period}", tenant_id=tenant_id, period=period, lines=lines,
            total_cents=sum(line.amount_cents for line in lines), status="draft",
        )  # fmt: skip

    async def issue(self, tenant_id: str, period: str) -> tuple[Invoice, bool]:
        _, end_us = ledger.month_bounds(period)
        if ledger.to_us(now()) < end_us:
            raise Conflict(f"{period} has not ended; an invoice is issued once its month is over")
        existing = await self._invoices.get(f"inv-{tenant_id}-{period}")
        if existing is not None:
            return Invoice.model_validate(existing["invoice"]), False
        draft = await self.draft(tenant_id, period)
        issued = draft.model_copy(update={"status": "issued", "issued_at": now()})
        document: InvoiceDoc = {
            "_id": issued.invoice_id, "tenant_id": tenant_id, "period": period,
            "invoice": issued.model_dump(mode="json", by_alias=True),
        }  # fmt: skip
        if not await self._invoices.issue(document):
            raced = await self._invoices.get(issued.invoice_id)
            assert raced is not None
            return Invoice.model_validate(raced["invoice"]), False
        return issued, True

    async def get(self, tenant_id: str | None, invoice_id: str) -> Invoice:
        doc = await self._invoices.get(invoice_id)
        if doc is None or (tenant_id is not None and doc["tenant_id"] != tenant_id):
            raise NotFound(f"invoice {invoice_id!r} does not exist")
        return Invoice.model_validate(doc["invoice"])

    async def list(self, tenant_id: str | None) -> list[Invoice]:
        return [
            Invoice.model_validate(doc["invoice"])
            for doc in await self._invoices.of_tenant(tenant_id)
        ]


def _line_order(key: tuple[str, str]) -> tuple[bool, str, str]:
    """`default`'s lines first, then each project's, each by spec."""
    project, spec_name = key
    return project != DEFAULT_PROJECT, project, spec_name
