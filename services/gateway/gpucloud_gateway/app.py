"""Gateway: the public API, identity, tenants, audit and the proxy to instance URLs."""

from __future__ import annotations

from fastapi import Request, Response

from gpucloud_libs.clock import now
from gpucloud_libs.identity import require_strong_key
from gpucloud_libs.kafka_access import ACCESS
from gpucloud_libs.runtime import ServiceRuntime

from . import credentials
from .address_guard import AddressGuard
from .api import router
from .api_keys import ApiKeys
from .audit import AuditLog, AuditMiddleware
from .authentication import Authenticator
from .authorization import Authorizer
from .background import Background
from .console_sessions import ConsoleSessions
from .console_site import console_router
from .forward_api import router as forward_router
from .forwarding import Forwarder
from .identity_cache import IdentityCache
from .instance_urls import InstanceHosts, InstanceProxy, RelayedProblem
from .long_connections import LongConnections
from .openapi import OpenApiAggregator
from .ratelimit import RateLimiter
from .security_headers import SecurityHeaders
from .service_load import ServiceLoad
from .sessions import Sessions
from .settings import GatewaySettings
from .store import (
    INDEXES,
    ApiKeyStore,
    AuditStore,
    ConsoleSessionStore,
    SpentLinkStore,
    TenantStore,
    UserStore,
)
from .tenants import Tenants
from .tunnels import InstanceTunnels
from .upstream import Upstream
from .users import Users

settings = GatewaySettings()
runtime = ServiceRuntime(settings, kafka_access=ACCESS["gateway"], indexes=INDEXES)
signer = runtime.identity_signer()
runtime.check_key_at_start(
    lambda: require_strong_key(
        settings.session_secret.get_secret_value(), setting="GPUCLOUD_SESSION_SECRET"
    )
)
if settings.bootstrap_admin_key is not None:
    bootstrap_key = settings.bootstrap_admin_key.get_secret_value()
    runtime.check_key_at_start(lambda: credentials.check_bootstrap_key(bootstrap_key))
tenant_store, user_store, key_store = (
    TenantStore(runtime.db),
    UserStore(runtime.db),
    ApiKeyStore(runtime.db),
)
background, limiter = Background(), RateLimiter()
cache = IdentityCache(key_store, user_store, tenant_store, ttl_s=settings.auth_cache_ttl_s)
authorizer = Authorizer(settings, cache, limiter)
authenticator = Authenticator(settings, key_store, cache, background)
sessions = Sessions(settings, user_store, authenticator, limiter)
console = ConsoleSessions(settings, ConsoleSessionStore(runtime.db), authenticator, sessions)
api_keys = ApiKeys(key_store, cache)
users = Users(user_store, cache, api_keys)
tenants = Tenants(
    settings, tenant_store, cache, users, api_keys, runtime.broker, source=runtime.source
)
audit = AuditLog(
    AuditStore(runtime.db), runtime.broker, source=runtime.source, spawn=background.spawn,
    users=user_store, keys=key_store,
)  # fmt: skip
api_upstream = Upstream(
    connect_timeout_s=settings.upstream_connect_timeout_s,
    read_timeout_s=settings.upstream_read_timeout_s,
    egress=settings.egress,
)
instance_upstream = Upstream(
    connect_timeout_s=settings.upstream_connect_timeout_s,
    read_timeout_s=settings.instance_read_timeout_s,
    egress=settings.egress,
)
forwarder = Forwarder(settings, api_upstream, signer)
service_load = ServiceLoad(settings, api_upstream, signer)
connections = LongConnections(settings)
spent_links = SpentLinkStore(runtime.db)
instance_proxy = InstanceProxy(
    settings,
    authenticator,
    sessions,
    instance_upstream,
    signer,
    service_load,
    authorizer,
    connections,
    spent_links,
)


async def _sweep_outboxes() -> None:
    """Tenant and audit events that did not get out at write time go out here."""
    await tenants.republish()
    await audit.republish()


async def _sweep_spent_links() -> None:
    await spent_links.delete_expired(now())


async def _start() -> None:
    if settings.bootstrap_admin_key is not None:
        await authenticator.install_bootstrap_admin(settings.bootstrap_admin_key.get_secret_value())
    await tenants.republish(settled=False)  # nothing of this process is publishing yet


async def _stop() -> None:
    await api_upstream.close()
    await instance_upstream.close()


runtime.on_start(_start)
runtime.on_stop(_stop)
runtime.every(settings.outbox_sweep_s, _sweep_outboxes, "outbox")
runtime.every(settings.service_load_report_s, service_load.report, "service-load")
runtime.every(3600.0, console.sweep_expired, "console-sessions")
runtime.every(3600.0, _sweep_spent_links, "spent-session-links")

app = runtime.create_app(
    title="gpucloud",
    description="GPU cloud control plane: the public API. The whole platform's "
    "API is described at /v1/openapi.json.",
    # The console's catch-all goes last: every API route is matched before it.
    routers=[router, forward_router, console_router(settings)],
    parts=[
        authenticator,
        authorizer,
        sessions,
        console,
        tenants,
        users,
        api_keys,
        audit,
        instance_proxy,
        InstanceTunnels(authenticator, authorizer, instance_proxy, audit, connections),
        OpenApiAggregator(api_upstream, forwarder.base_urls),
        forwarder,
    ],
)


async def _relay_problem(_request: Request, problem: Exception) -> Response:
    assert isinstance(problem, RelayedProblem)
    return problem.response


app.add_exception_handler(RelayedProblem, _relay_problem)
app.add_middleware(AuditMiddleware, audit=audit)
# Inside InstanceHosts: a workload's own answers through its URL keep their headers.
app.add_middleware(SecurityHeaders, served_over_tls=settings.served_over_tls)
app.add_middleware(InstanceHosts, proxy=instance_proxy)
# Outermost: an address that keeps failing authentication reaches nothing (review M8).
app.add_middleware(AddressGuard, settings=settings, limiter=limiter)
