"""Metering service: exact usage from lifecycle, node health and storage events, prices,
invoices, budgets and FinOps alerts."""

from __future__ import annotations

from fastapi import FastAPI

from gpucloud_libs.kafka_access import ACCESS
from gpucloud_libs.runtime import ServiceRuntime
from gpucloud_libs.topics import (
    INFERENCE_LIFECYCLE,
    INSTANCE_LIFECYCLE,
    JOB_LIFECYCLE,
    NODE_HEALTH,
    STORAGE_USAGE,
    TENANTS,
)

from . import mirror
from .api import router
from .budgets import Budgets
from .changes import UsageChanges
from .facts import FactRecorder
from .handlers import EventHandlers
from .invoices import Invoices
from .prices import Prices
from .reports import Reports
from .settings import MeteringSettings
from .store import INDEXES, BudgetStore, FactStore, InvoiceStore, PriceStore, UsageRecordStore
from .usage_records import UsageRecords


def create_app(settings: MeteringSettings) -> FastAPI:
    """The metering service, wired: its stores and parts, its consumers and schedules."""
    runtime = ServiceRuntime(settings, kafka_access=ACCESS["metering"], indexes=INDEXES)
    facts = FactStore(runtime.db)
    changes = UsageChanges()
    prices = Prices(PriceStore(runtime.db))
    budgets = Budgets(facts, prices, BudgetStore(runtime.db), runtime.broker, source=runtime.source)
    usage_records = UsageRecords(
        facts, prices, UsageRecordStore(runtime.db), runtime.broker, changes,
        source=runtime.source, settle_s=settings.usage_settle_s,
    )  # fmt: skip
    handlers = EventHandlers(FactRecorder(facts, changes), budgets)
    runtime.subscribe_batches(INSTANCE_LIFECYCLE, handlers.on_lifecycle)
    runtime.subscribe_batches(JOB_LIFECYCLE, handlers.on_job_lifecycle)
    runtime.subscribe_batches(INFERENCE_LIFECYCLE, handlers.on_inference_lifecycle)
    runtime.subscribe(STORAGE_USAGE, handlers.on_storage_usage)
    runtime.subscribe(TENANTS, handlers.on_tenant)
    runtime.subscribe(NODE_HEALTH, handlers.on_node_health)

    runtime.every(mirror.REREAD_S, facts.reread, "facts-reread")
    runtime.every(settings.budget_interval_s, budgets.evaluate, "budgets")
    runtime.every(settings.usage_interval_s, usage_records.publish, "usage-records")
    runtime.every(settings.usage_interval_s, budgets.sweep, "budget-notices-outbox")
    runtime.every(settings.usage_interval_s, usage_records.sweep, "usage-records-outbox")

    return runtime.create_app(
        title="gpucloud metering",
        description="Exact usage from lifecycle and storage events, prices, invoices and budgets.",
        routers=[router],
        parts=[
            prices,
            Reports(facts, prices),
            Invoices(facts, prices, InvoiceStore(runtime.db)),
            budgets,
        ],
    )
