"""Monitoring service: GPU telemetry ingestion, alert rules, inventory and node health."""

from __future__ import annotations

from gpucloud_libs.runtime import ServiceRuntime

from .api import router
from .settings import MonitoringSettings

settings = MonitoringSettings()
runtime = ServiceRuntime(settings)

app = runtime.create_app(
    title="gpucloud monitoring",
    description="GPU telemetry ingestion, alert rules, inventory and node health.",
    routers=[router],
)
