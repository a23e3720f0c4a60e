"""Metering service: Exact usage from lifecycle and storage events, prices, invoices and budgets."""

from __future__ import annotations

from gpucloud_libs.runtime import ServiceRuntime

from .api import router
from .settings import MeteringSettings

settings = MeteringSettings()
runtime = ServiceRuntime(settings)

app = runtime.create_app(
    title="gpucloud metering",
    description="Exact usage from lifecycle and storage events, prices, invoices and budgets.",
    routers=[router],
)
