"""Monitoring service: GPU telemetry ingestion, alert rules, inventory and node health."""

from __future__ import annotations

from gpucloud_libs.kube import KubeClient
from gpucloud_libs.runtime import ServiceRuntime
from gpucloud_libs.topics import TELEMETRY

from .api import router
from .handlers import EventHandlers
from .service import MonitoringService
from .settings import MonitoringSettings
from .store import INDEXES, MonitoringStore

settings = MonitoringSettings()
runtime = ServiceRuntime(settings, indexes=INDEXES)
kube = KubeClient(settings.kubeconfig)
service = MonitoringService(settings, MonitoringStore(runtime.db), runtime.broker, kube)
handlers = EventHandlers(service)


runtime.on_start(kube.connect)
runtime.on_start(service.start)
runtime.on_stop(service.close)
runtime.on_stop(kube.close)
runtime.add_readiness_check("kubernetes", kube.ping)
runtime.subscribe_batches(TELEMETRY, handlers.on_telemetry)
runtime.every(1.0, service.deliver_webhooks, "webhooks")
runtime.every(5.0, service.republish, "republish")
runtime.every(5.0, service.reload_rules, "rules")
runtime.every(30.0, service.flush_quiet, "flush-quiet")
runtime.every(30.0, service.refresh_nodes, "nodes")
runtime.every(3600.0, service.retention, "retention")

app = runtime.create_app(
    title="gpucloud monitoring",
    description="GPU telemetry ingestion, alert rules, inventory and node health.",
    routers=[router],
    parts=[service],
)
