"""Gateway: the public API, identity, tenants, audit and the proxy to instance URLs."""

from __future__ import annotations

from fastapi import Request, Response

from gpucloud_libs.runtime import ServiceRuntime

from .api import router
from .audit import AuditLog, AuditMiddleware
from .forwarding import Forwarder
from .instance_urls import InstanceHosts, InstanceProxy, RelayedProblem
from .openapi import OpenApiAggregator
from .service import GatewayService
from .settings import GatewaySettings
from .store import INDEXES, ApiKeyStore, AuditStore, TenantStore, UserStore
from .upstream import Upstream

settings = GatewaySettings()
runtime = ServiceRuntime(settings, indexes=INDEXES)
service = GatewayService(
    settings,
    TenantStore(runtime.db),
    UserStore(runtime.db),
    ApiKeyStore(runtime.db),
    runtime.broker,
    source=runtime.source,
)
audit = AuditLog(AuditStore(runtime.db), runtime.broker, source=runtime.source, spawn=service.spawn)
api_upstream = Upstream(
    connect_timeout_s=settings.upstream_connect_timeout_s,
    read_timeout_s=settings.upstream_read_timeout_s,
)
instance_upstream = Upstream(
    connect_timeout_s=settings.upstream_connect_timeout_s,
    read_timeout_s=settings.instance_read_timeout_s,
)
forwarder = Forwarder(settings, api_upstream)
instance_proxy = InstanceProxy(settings, service, instance_upstream)


async def _sweep_outboxes() -> None:
    """Tenant and audit events that did not get out at write time go out here."""
    await service.republish_tenants()
    await audit.republish()


async def _start() -> None:
    if settings.bootstrap_admin_key is not None:
        await service.install_bootstrap_admin(settings.bootstrap_admin_key.get_secret_value())
    await service.republish_tenants()


async def _stop() -> None:
    await api_upstream.close()
    await instance_upstream.close()


runtime.on_start(_start)
runtime.on_stop(_stop)
runtime.every(settings.outbox_sweep_s, _sweep_outboxes, "outbox")

app = runtime.create_app(
    title="gpucloud",
    description="GPU cloud control plane: the public API. The whole platform's "
    "API is described at /v1/openapi.json.",
    routers=[router],
)


async def _relay_problem(_request: Request, problem: Exception) -> Response:
    assert isinstance(problem, RelayedProblem)
    return problem.response


app.add_exception_handler(RelayedProblem, _relay_problem)
app.state.service = service
app.state.audit = audit
app.state.forwarder = forwarder
app.state.instance_proxy = instance_proxy
app.state.openapi = OpenApiAggregator(api_upstream, forwarder.base_urls)
app.add_middleware(AuditMiddleware, audit=audit)
app.add_middleware(InstanceHosts, proxy=instance_proxy)
