"""OpenTelemetry: providers, OTLP export by configuration, and HTTP trace propagation.

Kafka hops propagate through FastStream's telemetry middleware (see kafka.py),
which writes and reads the W3C `traceparent` header on every message.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

from opentelemetry import metrics, propagate, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind, Status, StatusCode
from starlette.types import ASGIApp, Message, Receive, Scope, Send


@dataclass(frozen=True)
class Telemetry:
    tracer_provider: TracerProvider
    meter_provider: MeterProvider

    def shutdown(self) -> None:
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


def setup_telemetry(service: str, otlp_endpoint: str | None) -> Telemetry:
    """Create this process's providers; export over OTLP/HTTP only when an endpoint is set."""
    resource = Resource.create(
        {"service.name": f"gpucloud-{service}", "service.namespace": "gpucloud"}
    )
    tracer_provider = TracerProvider(resource=resource)
    readers: list[MetricReader] = []
    if otlp_endpoint:
        # Imported here so a process without an exporter configured never loads it.
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
            OTLPMetricExporter,
        )
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter,
        )

        base = otlp_endpoint.rstrip("/")
        tracer_provider.add_span_processor(
            BatchSpanProcessor(OTLPSpanExporter(f"{base}/v1/traces"))
        )
        readers.append(PeriodicExportingMetricReader(OTLPMetricExporter(f"{base}/v1/metrics")))
    meter_provider = MeterProvider(resource=resource, metric_readers=readers)
    trace.set_tracer_provider(tracer_provider)
    metrics.set_meter_provider(meter_provider)
    return Telemetry(tracer_provider, meter_provider)


class TracingMiddleware:
    """ASGI middleware: one SERVER span per request, continuing the caller's trace."""

    def __init__(self, app: ASGIApp, service: str) -> None:
        self.app = app
        self.tracer = trace.get_tracer(f"gpucloud.{service}.http")
        meter = metrics.get_meter(f"gpucloud.{service}.http")
        self.duration = meter.create_histogram(
            "http.server.request.duration", unit="s", description="HTTP request duration"
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        carrier: Mapping[str, str] = {
            key.decode("latin-1"): value.decode("latin-1") for key, value in scope["headers"]
        }
        method = scope["method"]
        status_code = 500
        started = time.perf_counter()
        with self.tracer.start_as_current_span(
            f"{method} {scope['path']}",
            context=propagate.extract(carrier),
            kind=SpanKind.SERVER,
            attributes={"http.request.method": method, "url.path": scope["path"]},
        ) as span:

            async def send_with_status(message: Message) -> None:
                nonlocal status_code
                if message["type"] == "http.response.start":
                    status_code = int(message["status"])
                    span.set_attribute("http.response.status_code", status_code)
                await send(message)

            try:
                await self.app(scope, receive, send_with_status)
            finally:
                if status_code >= 500:
                    span.set_status(Status(StatusCode.ERROR))
                route = scope.get("route")
                path_template = getattr(route, "path", scope["path"])
                span.update_name(f"{method} {path_template}")
                self.duration.record(
                    time.perf_counter() - started,
                    {"http.request.method": method, "http.route": path_template,
                     "http.response.status_code": status_code},
                )  # fmt: skip
