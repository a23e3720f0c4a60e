"""All MongoDB access of the metering service.

Facts (transitions, storage samples, node health changes, prices) are insert-only documents whose
`_id` is their natural key, so a replayed or duplicated event is a duplicate
key, never a second count, and nothing is ever read-modified-written. Usage is
derived from the facts when asked.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pymongo import ASCENDING, IndexModel
from pymongo.errors import BulkWriteError, DuplicateKeyError

from gpucloud_libs.mongo import Collection, Database, IndexPlan, typed

from .documents import (
    BudgetDoc,
    BudgetFields,
    HealthChangeDoc,
    InvoiceDoc,
    NoticeDoc,
    PriceDoc,
    SampleDoc,
    Spender,
    SpendLimits,
    TransitionDoc,
    UsageRecordDoc,
    spender_field,
)
from .mirror import FactMirror

TRANSITIONS = "transitions"
SAMPLES = "storage_samples"
HEALTH = "node_health"
PRICES = "prices"
BUDGETS = "budgets"
TENANT_CAPS = "tenant_caps"
NOTICES = "budget_notices"
USAGE_RECORDS = "usage_records"
INVOICES = "invoices"

#: Up to this many instances (or storages) of a tenant are read one by one (_facts_of).
FEW_SUBJECTS = 8

FactT = TypeVar("FactT", bound=Mapping[str, Any])

INDEXES: IndexPlan = {
    TRANSITIONS: [
        IndexModel([("recorded_minute", ASCENDING)]),
        IndexModel([("tenant_id", ASCENDING)]),
        IndexModel([("instance_id", ASCENDING)]),
        IndexModel([("job_id", ASCENDING)]),
        IndexModel([("service_id", ASCENDING)]),
    ],
    SAMPLES: [
        IndexModel([("recorded_minute", ASCENDING)]),
        IndexModel([("tenant_id", ASCENDING)]),
        IndexModel([("storage_id", ASCENDING)]),
    ],
    NOTICES: [IndexModel([("published", ASCENDING)])],
    USAGE_RECORDS: [IndexModel([("published", ASCENDING)])],
    INVOICES: [IndexModel([("tenant_id", ASCENDING), ("period", ASCENDING)])],
}


async def _insert_new(collection: Collection[FactT], document: FactT) -> bool:
    """Insert; False if a document with that `_id` is already there."""
    try:
        await collection.insert_one(document)
    except DuplicateKeyError:
        return False
    return True


async def _facts_of(
    collection: Collection[FactT], tenant_id: str, field: str, ids: set[str]
) -> list[FactT]:
    """The facts of a few instances or storages of one tenant. One equality query per
    id: FerretDB hands equality filters to PostgreSQL, but filters `$in` itself
    after reading every document; past a handful, one read of the tenant's facts
    is cheaper."""
    if len(ids) > FEW_SUBJECTS:
        everything = await collection.find({"tenant_id": tenant_id}).to_list()
        return [doc for doc in everything if doc[field] in ids]
    found: list[FactT] = []
    for subject_id in sorted(ids):
        found += await collection.find({"tenant_id": tenant_id, field: subject_id}).to_list()
    return found


class FactStore:
    def __init__(self, db: Database) -> None:
        self._transitions = typed(db, TRANSITIONS, TransitionDoc)
        self._samples = typed(db, SAMPLES, SampleDoc)
        self._health = typed(db, HEALTH, HealthChangeDoc)
        # Whole-tenant and platform-wide reads come from memory (mirror.py).
        self._all_transitions = FactMirror(self._transitions)
        self._all_samples = FactMirror(self._samples)

    async def record_transitions(
        self, documents: list[TransitionDoc]
    ) -> list[tuple[TransitionDoc, TransitionDoc]]:
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

    async def record_sample(self, document: SampleDoc) -> bool:
        return await _insert_new(self._samples, document)

    async def record_health(self, document: HealthChangeDoc) -> bool:
        return await _insert_new(self._health, document)

    async def health(self) -> list[HealthChangeDoc]:
        """Every node health change: a handful per node a year, read whole."""
        return await self._health.find({}).to_list()

    async def reread(self) -> None:
        """Read the mirrored facts whole again (mirror.py): the service's background pass."""
        await self._all_transitions.reread()
        await self._all_samples.reread()

    async def transitions(self, tenant_id: str | None) -> list[TransitionDoc]:
        """Every transition of a tenant, or of all tenants (None)."""
        return await self._all_transitions.of(tenant_id)

    async def transitions_of(self, tenant_id: str, instance_ids: set[str]) -> list[TransitionDoc]:
        return await _facts_of(self._transitions, tenant_id, "instance_id", instance_ids)

    async def transitions_of_job(self, tenant_id: str, job_id: str) -> list[TransitionDoc]:
        """Every run's transitions of one job."""
        return await self._transitions.find({"tenant_id": tenant_id, "job_id": job_id}).to_list()

    async def transitions_of_service(self, tenant_id: str, service_id: str) -> list[TransitionDoc]:
        """Every replica's transitions of one inference service."""
        return await self._transitions.find(
            {"tenant_id": tenant_id, "service_id": service_id}
        ).to_list()

    async def samples(self, tenant_id: str | None) -> list[SampleDoc]:
        """Every storage sample of a tenant, or of all tenants (None)."""
        return await self._all_samples.of(tenant_id)

    async def samples_of(self, tenant_id: str, storage_ids: set[str]) -> list[SampleDoc]:
        return await _facts_of(self._samples, tenant_id, "storage_id", storage_ids)


class PriceStore:
    def __init__(self, db: Database) -> None:
        self._prices = typed(db, PRICES, PriceDoc)

    async def add(self, document: PriceDoc) -> bool:
        return await _insert_new(self._prices, document)

    async def all(self) -> list[PriceDoc]:
        return await self._prices.find({}).sort("effective_from_us", ASCENDING).to_list()

    async def remove_if_after(self, price_id: str, now_us: int) -> bool:
        """Delete the price if it takes effect after `now_us`, in one step."""
        result = await self._prices.delete_one(
            {"_id": price_id, "effective_from_us": {"$gt": now_us}}
        )
        return result.deleted_count == 1


class BudgetStore:
    def __init__(self, db: Database) -> None:
        self._budgets = typed(db, BUDGETS, BudgetDoc)
        self._caps = db[TENANT_CAPS]
        self._notices = typed(db, NOTICES, NoticeDoc)

    async def put(self, tenant_id: str, fields: BudgetFields) -> None:
        doc: BudgetDoc = {"_id": tenant_id, **fields}
        await self._budgets.replace_one({"_id": tenant_id}, doc, upsert=True)

    async def get(self, tenant_id: str) -> BudgetDoc | None:
        return await self._budgets.find_one({"_id": tenant_id})

    async def all(self) -> list[BudgetDoc]:
        return await self._budgets.find({}).to_list()

    async def set_cap(self, tenant_id: str, cap_cents: int | None, limits: SpendLimits) -> None:
        """The tenant's monthly spend cap, its users' own monthly limits and its projects'
        monthly budgets."""
        doc = {"_id": tenant_id, "spend_cap_cents": cap_cents,
               "user_spend_limits": limits.user, "project_budgets": limits.project}  # fmt: skip
        await self._caps.replace_one({"_id": tenant_id}, doc, upsert=True)

    async def caps(self) -> dict[str, int]:
        docs = await self._caps.find({"spend_cap_cents": {"$ne": None}}).to_list()
        return {doc["_id"]: int(doc["spend_cap_cents"]) for doc in docs}

    async def spend_limits(self) -> dict[str, SpendLimits]:
        """Each tenant's users' monthly spend limits and projects' monthly budgets, for
        the tenants that set any."""
        found = {
            doc["_id"]: SpendLimits(
                doc.get("user_spend_limits") or {}, doc.get("project_budgets") or {}
            )
            for doc in await self._caps.find({}).to_list()
        }
        return {
            tenant_id: limits
            for tenant_id, limits in found.items()
            if limits.user or limits.project
        }

    async def forget_stops(self, tenant_id: str, spender: Spender, spender_id: str) -> None:
        """A user's or a project's stop notices (its limit changed): the next round
        decides anew."""
        await self._notices.delete_many(
            {"tenant_id": tenant_id, "kind": f"{spender}_stop", spender_field(spender): spender_id}
        )

    async def claim_notice(self, document: NoticeDoc) -> bool:
        """The first claim of a notice (threshold or stop, per period) wins; later ones see False."""
        claimed: NoticeDoc = {**document, "published": False}
        return await _insert_new(self._notices, claimed)

    async def mark_published(self, notice_id: str) -> None:
        await self._notices.update_one({"_id": notice_id}, {"$set": {"published": True}})

    async def unpublished(self) -> list[NoticeDoc]:
        return await self._notices.find({"published": False}).to_list()

    async def notice(self, notice_id: str) -> NoticeDoc | None:
        return await self._notices.find_one({"_id": notice_id})


class UsageRecordStore:
    def __init__(self, db: Database) -> None:
        self._records = typed(db, USAGE_RECORDS, UsageRecordDoc)

    async def claim(self, document: UsageRecordDoc) -> bool:
        claimed: UsageRecordDoc = {**document, "published": False}
        return await _insert_new(self._records, claimed)

    async def known_ids(self) -> set[str]:
        return {doc["_id"] for doc in await self._records.find({}, {"_id": 1}).to_list()}

    async def mark_published(self, usage_id: str) -> None:
        await self._records.update_one({"_id": usage_id}, {"$set": {"published": True}})

    async def unpublished(self) -> list[UsageRecordDoc]:
        return await self._records.find({"published": False}).to_list()

    async def get(self, usage_id: str) -> UsageRecordDoc | None:
        return await self._records.find_one({"_id": usage_id})


class InvoiceStore:
    def __init__(self, db: Database) -> None:
        self._invoices = typed(db, INVOICES, InvoiceDoc)

    async def issue(self, document: InvoiceDoc) -> bool:
        """Issued once: a second issue of the same tenant and period keeps the first."""
        return await _insert_new(self._invoices, document)

    async def get(self, invoice_id: str) -> InvoiceDoc | None:
        return await self._invoices.find_one({"_id": invoice_id})

    async def of_tenant(self, tenant_id: str | None) -> list[InvoiceDoc]:
        query = {} if tenant_id is None else {"tenant_id": tenant_id}
        return await self._invoices.find(query).sort("_id", ASCENDING).to_list()
