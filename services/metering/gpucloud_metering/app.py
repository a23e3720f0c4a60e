"""Metering service: exact usage from lifecycle and storage events, prices,
invoices, budgets and FinOps alerts."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from gpucloud_libs.runtime import ServiceRuntime
from gpucloud_libs.topics import INSTANCE_LIFECYCLE, STORAGE_USAGE, TENANTS

from .api import router
from .handlers import EventHandlers
from .service import MeteringService
from .settings import MeteringSettings
from .store import INDEXES, BudgetStore, FactStore, InvoiceStore, PriceStore, UsageRecordStore

log = logging.getLogger(__name__)

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
)
handlers = EventHandlers(service)
runtime.subscribe_batches(INSTANCE_LIFECYCLE, handlers.on_lifecycle)
runtime.subscribe(STORAGE_USAGE, handlers.on_storage_usage)
runtime.subscribe(TENANTS, handlers.on_tenant)

_loops: list[asyncio.Task[None]] = []


def _every(interval_s: float, work: Callable[[], Awaitable[object]], name: str) -> None:
    async def loop() -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await work()
            except Exception:
                log.warning(
                    "periodic work failed; next round retries", extra={"work": name}, exc_info=True
                )

    _loops.append(asyncio.get_running_loop().create_task(loop(), name=name))


async def _start() -> None:
    _every(settings.budget_interval_s, service.evaluate_budgets, "budgets")
    _every(settings.usage_interval_s, service.publish_usage_records, "usage-records")
    _every(settings.usage_interval_s, service.sweep_outbox, "outbox")


async def _stop() -> None:
    for task in _loops:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


runtime.on_start(_start)
runtime.on_stop(_stop)

app = runtime.create_app(
    title="gpucloud metering",
    description="Exact usage from lifecycle and storage events, prices, invoices and budgets.",
    routers=[router],
)
app.state.service = service
