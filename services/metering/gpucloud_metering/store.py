"""All MongoDB access of the metering service.

Facts (transitions, storage samples, node health changes, prices) are insert-only documents whose
`_id` is their natural key, so a replayed or duplicated event is a duplicate
key, never a second count. Usage is derived from the facts when asked.

An instance span is the read model of one instance: its recorded transitions
and every UTC month from its first to its last, and whether it is still
billing. A read over a time range loads the spans of that range's months and
the open ones, with equality queries only (FerretDB hands nothing else to
PostgreSQL), instead of every fact ever recorded. Spans are derived from the
transitions and written after them; every update merges, so a replayed batch
or a rebuild running beside the consumer leaves the same span.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

from pymongo import ASCENDING, IndexModel
from pymongo.errors import BulkWriteError, DuplicateKeyError

from gpucloud_libs.mongo import Database, Document, IndexPlan

from . import ledger

TRANSITIONS = "transitions"
SAMPLES = "storage_samples"
HEALTH = "node_health"
PRICES = "prices"
BUDGETS = "budgets"
TENANT_CAPS = "tenant_caps"
NOTICES = "budget_notices"
USAGE_RECORDS = "usage_records"
INVOICES = "invoices"
SPANS = "instance_spans"
SPAN_MONTHS = "span_months"
META = "metering_meta"
#: The META document that says every transition recorded so far is in a span.
SPANS_BUILT = "instance_spans_built"

#: Up to this many instances of a tenant are read one by one (FactStore.transitions_of).
FEW_INSTANCES = 8

INDEXES: IndexPlan = {
    TRANSITIONS: [
        IndexModel([("tenant_id", ASCENDING)]),
        IndexModel([("instance_id", ASCENDING)]),
    ],
    SAMPLES: [IndexModel([("tenant_id", ASCENDING)])],
    NOTICES: [IndexModel([("published", ASCENDING)])],
    USAGE_RECORDS: [IndexModel([("published", ASCENDING)])],
    SPANS: [IndexModel([("months", ASCENDING)]), IndexModel([("open", ASCENDING)])],
    INVOICES: [IndexModel([("tenant_id", ASCENDING), ("period", ASCENDING)])],
}


async def _insert_new(collection: Any, document: Document) -> bool:
    """Insert; False if a document with that `_id` is already there."""
    try:
        await collection.insert_one(document)
    except DuplicateKeyError:
        return False
    return True


def _span_fact(transition: Document) -> Document:
    return {key: value for key, value in transition.items() if key not in ("_id", "event_id")}


class FactStore:
    def __init__(self, db: Database) -> None:
        self._transitions = db[TRANSITIONS]
        self._samples = db[SAMPLES]
        self._health = db[HEALTH]
        self._spans = db[SPANS]
        self._span_months = db[SPAN_MONTHS]
        self._meta = db[META]
        self._months_noted: set[str] = set()
        self._spans_built = False

    async def record_transitions(
        self, documents: list[Document]
    ) -> list[tuple[Document, Document]]:
        """Record many at once; repeats are skipped and returned as (repeat, kept) pairs."""
        if not documents:
            return []
        try:
            await self._transitions.insert_many(documents, ordered=False)
        except BulkWriteError as error:
            errors = error.details.get("writeErrors", [])
            if any(e.get("code") != 11000 for e in errors):
                raise
            repeats = [documents[e["index"]] for e in errors]
            kept = {
                doc["_id"]: doc
                for doc in await self._transitions.find(
                    {"_id": {"$in": [d["_id"] for d in repeats]}}
                ).to_list()
            }
            return [(repeat, kept[repeat["_id"]]) for repeat in repeats if repeat["_id"] in kept]
        return []

    async def record_sample(self, document: Document) -> bool:
        return await _insert_new(self._samples, document)

    async def record_health(self, document: Document) -> bool:
        return await _insert_new(self._health, document)

    async def health(self) -> list[Document]:
        """Every node health change: a handful per node a year, read whole."""
        return await self._health.find({}).to_list()

    async def transitions(self, tenant_id: str | None) -> list[Document]:
        query = {} if tenant_id is None else {"tenant_id": tenant_id}
        return await self._transitions.find(query).to_list()

    async def extend_spans(self, transitions: list[Document], *, every_one: bool = False) -> None:
        """Add recorded transitions to their instances' spans; `every_one` when they
        are all the recorded transitions of their instances (the build).

        One instance's transitions come from one partition, so one consumer at a
        time extends its span; the read-then-write below relies on that only for
        the months, which are added, never removed.
        """
        by_instance: dict[tuple[str, str], list[Document]] = defaultdict(list)
        for transition in transitions:
            by_instance[(transition["tenant_id"], transition["instance_id"])].append(transition)
        for (tenant_id, instance_id), found in by_instance.items():
            span_id = f"{tenant_id}/{instance_id}"
            span = await self._spans.find_one({"_id": span_id}, {"facts": 1})
            added = {f"s{t['sequence']}": _span_fact(t) for t in found}
            facts = [*(span or {}).get("facts", {}).values(), *added.values()]
            if span is None and not every_one and not await self.spans_built():
                # Its earlier transitions may not be in a span yet; the build running
                # meanwhile may have read them without this batch. Months must cover both.
                facts += await self.transitions_of(tenant_id, {instance_id})
            months = ledger.months_between(
                min(f["at_us"] for f in facts), max(f["at_us"] for f in facts)
            )
            last = max(facts, key=lambda f: int(f["sequence"]))
            await self._spans.update_one(
                {"_id": span_id},
                {
                    "$set": {f"facts.{key}": fact for key, fact in added.items()},
                    "$addToSet": {"months": {"$each": months}},
                    "$max": {"last_sequence": last["sequence"]},
                    "$setOnInsert": {"tenant_id": tenant_id, "instance_id": instance_id},
                },
                upsert=True,
            )
            # Open while its last transition (by sequence) is billable; a later
            # sequence recorded meanwhile has set its own.
            await self._spans.update_one(
                {"_id": span_id, "last_sequence": last["sequence"]},
                {"$set": {"open": last["state"] in ledger.BILLABLE_STATES}},
            )
            for month in set(months) - self._months_noted:
                await self._span_months.replace_one({"_id": month}, {"_id": month}, upsert=True)
                self._months_noted.add(month)

    async def spans_built(self) -> bool:
        if not self._spans_built:
            self._spans_built = await self._meta.find_one({"_id": SPANS_BUILT}) is not None
        return self._spans_built

    async def build_spans(self) -> int:
        """Put the transitions recorded before spans existed into spans: once per
        database (the next ones extend spans as they are recorded). Returns how
        many transitions it read."""
        if await self.spans_built():
            return 0
        transitions = await self._transitions.find({}).to_list()
        await self.extend_spans(transitions, every_one=True)
        await self._meta.replace_one(
            {"_id": SPANS_BUILT}, {"_id": SPANS_BUILT, "at": datetime.now(UTC)}, upsert=True
        )
        self._spans_built = True
        return len(transitions)

    async def transitions_active(
        self, tenant_id: str | None, start_us: int, end_us: int
    ) -> list[Document]:
        """The transitions of every instance that may have held GPUs in [start, end):
        those with a span in one of its months, and those still billing."""
        first = ledger.period_of(ledger.from_us(start_us))
        last = ledger.period_of(ledger.from_us(end_us - 1))
        months = [
            doc["_id"]
            for doc in await self._span_months.find({}).to_list()
            if first <= doc["_id"] <= last
        ]
        scope = {} if tenant_id is None else {"tenant_id": tenant_id}
        spans: dict[str, Document] = {}
        for query in [*({"months": month, **scope} for month in months), {"open": True, **scope}]:
            for span in await self._spans.find(query, {"facts": 1}).to_list():
                spans[span["_id"]] = span
        return [fact for span in spans.values() for fact in span["facts"].values()]

    async def transitions_of(self, tenant_id: str, instance_ids: set[str]) -> list[Document]:
        """The transitions of a few instances of one tenant. One equality query per
        instance: FerretDB hands equality filters to PostgreSQL, but filters `$in`
        itself after reading every document; past a handful, one read of the tenant's
        facts is cheaper."""
        if len(instance_ids) > FEW_INSTANCES:
            return [
                doc for doc in await self.transitions(tenant_id)
                if doc["instance_id"] in instance_ids
            ]  # fmt: skip
        found: list[Document] = []
        for instance_id in sorted(instance_ids):
            query = {"tenant_id": tenant_id, "instance_id": instance_id}
            found += await self._transitions.find(query).to_list()
        return found

    async def samples(self, tenant_id: str | None) -> list[Document]:
        query = {} if tenant_id is None else {"tenant_id": tenant_id}
        return await self._samples.find(query).to_list()


class PriceStore:
    def __init__(self, db: Database) -> None:
        self._prices = db[PRICES]

    async def add(self, document: Document) -> bool:
        return await _insert_new(self._prices, document)

    async def all(self) -> list[Document]:
        return await self._prices.find({}).sort("effective_from_us", ASCENDING).to_list()


class BudgetStore:
    def __init__(self, db: Database) -> None:
        self._budgets = db[BUDGETS]
        self._caps = db[TENANT_CAPS]
        self._notices = db[NOTICES]

    async def put(self, tenant_id: str, fields: Document) -> None:
        await self._budgets.replace_one(
            {"_id": tenant_id}, {"_id": tenant_id, **fields}, upsert=True
        )

    async def get(self, tenant_id: str) -> Document | None:
        return await self._budgets.find_one({"_id": tenant_id})

    async def all(self) -> list[Document]:
        return await self._budgets.find({}).to_list()

    async def set_cap(self, tenant_id: str, cap_cents: int | None) -> None:
        await self._caps.replace_one(
            {"_id": tenant_id}, {"_id": tenant_id, "spend_cap_cents": cap_cents}, upsert=True
        )

    async def caps(self) -> dict[str, int]:
        docs = await self._caps.find({"spend_cap_cents": {"$ne": None}}).to_list()
        return {doc["_id"]: int(doc["spend_cap_cents"]) for doc in docs}

    async def claim_notice(self, document: Document) -> bool:
        """The first claim of a notice (threshold or stop, per period) wins; later ones see False."""
        return await _insert_new(self._notices, {**document, "published": False})

    async def mark_published(self, notice_id: str) -> None:
        await self._notices.update_one({"_id": notice_id}, {"$set": {"published": True}})

    async def unpublished(self) -> list[Document]:
        return await self._notices.find({"published": False}).to_list()

    async def notice(self, notice_id: str) -> Document | None:
        return await self._notices.find_one({"_id": notice_id})


class UsageRecordStore:
    def __init__(self, db: Database) -> None:
        self._records = db[USAGE_RECORDS]

    async def claim(self, document: Document) -> bool:
        return await _insert_new(self._records, {**document, "published": False})

    async def known_ids(self) -> set[str]:
        return {doc["_id"] for doc in await self._records.find({}, {"_id": 1}).to_list()}

    async def mark_published(self, usage_id: str) -> None:
        await self._records.update_one({"_id": usage_id}, {"$set": {"published": True}})

    async def unpublished(self) -> list[Document]:
        return await self._records.find({"published": False}).to_list()

    async def get(self, usage_id: str) -> Document | None:
        return await self._records.find_one({"_id": usage_id})


class InvoiceStore:
    def __init__(self, db: Database) -> None:
        self._invoices = db[INVOICES]

    async def issue(self, document: Document) -> bool:
        """Issued once: a second issue of the same tenant and period keeps the first."""
        return await _insert_new(self._invoices, document)

    async def get(self, invoice_id: str) -> Document | None:
        return await self._invoices.find_one({"_id": invoice_id})

    async def of_tenant(self, tenant_id: str | None) -> list[Document]:
        query = {} if tenant_id is None else {"tenant_id": tenant_id}
        return await self._invoices.find(query).sort("_id", ASCENDING).to_list()
