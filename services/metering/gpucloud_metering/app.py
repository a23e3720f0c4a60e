"""Metering service: exact usage from lifecycle, node health and storage events, prices,
invoices, budgets and FinOps alerts."""

from __future__ import annotations

from gpucloud_libs.runtime import ServiceRuntime
from gpucloud_libs.topics import INSTANCE_LIFECYCLE, NODE_HEALTH, STORAGE_USAGE, TENANTS

from .api import router
from .handlers import EventHandlers
from .service import MeteringService
from .settings import MeteringSettings
from .store import INDEXES, BudgetStore, FactStore, InvoiceStore, PriceStore, UsageRecordStore

settings = MeteringSettings()
runtime = ServiceRuntime(settings, indexes=INDEXES)
service = MeteringService(
    FactStore(runtime.db),
    PriceStore(runtime.db),
    BudgetStore(runtime.db),
    UsageRecordStore(runtime.db),
    InvoiceStore(runtime.db),
    runtime.broker,
    source=runtime.source,
    usage_settle_s=settings.usage_settle_s,
)
handlers = EventHandlers(service)
runtime.subscribe_batches(INSTANCE_LIFECYCLE, handlers.on_lifecycle)
runtime.subscribe(STORAGE_USAGE, handlers.on_storage_usage)
runtime.subscribe(TENANTS, handlers.on_tenant)
runtime.subscribe(NODE_HEALTH, handlers.on_node_health)

runtime.every(settings.budget_interval_s, service.evaluate_budgets, "budgets")
runtime.every(settings.usage_interval_s, service.publish_usage_records, "usage-records")
runtime.every(settings.usage_interval_s, service.sweep_outbox, "outbox")

app = runtime.create_app(
    title="gpucloud metering",
    description="Exact usage from lifecycle and storage events, prices, invoices and budgets.",
    routers=[router],
    parts=[service],
)
