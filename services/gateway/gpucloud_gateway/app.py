"""Gateway: the public API, identity, tenants, audit and the proxy to instance URLs."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import FastAPI, Request, Response

from gpucloud_libs.clock import now
from gpucloud_libs.identity import require_strong_key
from gpucloud_libs.kafka_access import ACCESS
from gpucloud_libs.outbound_guard import OutboundGuard
from gpucloud_libs.runtime import ServiceRuntime

from . import credentials
from .access_ends import AccessEnds
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
from .instance_links import SessionLinks
from .instance_targets import InstanceTargets, RelayedProblem
from .instance_urls import InstanceHosts, InstanceProxy
from .invitations import Invitations
from .long_connections import LongConnections
from .members_api import router as members_router
from .oidc import OidcClient
from .openapi import OpenApiAggregator
from .projects import Projects
from .projects_api import router as projects_router
from .ratelimit import RateLimiter
from .security_headers import SecurityHeaders
from .service_load import ServiceLoad
from .sessions import Sessions
from .settings import GatewaySettings
from .sso import SingleSignOn
from .sso_accounts import SsoAccounts
from .sso_api import router as sso_router
from .sso_store import SsoStore
from .store import (
    INDEXES,
    ApiKeyStore,
    AuditStore,
    ConsoleSessionStore,
    InvitationStore,
    SpentLinkStore,
    TenantStore,
    UserStore,
)
from .tenants import Tenants
from .tunnels import InstanceTunnels
from .upstream import Upstream
from .users import Users


@dataclass(frozen=True)
class Identity:
    """Who calls, and what they may do: the gateway's own parts before any proxying."""

    limiter: RateLimiter
    authenticator: Authenticator
    authorizer: Authorizer
    sessions: Sessions
    console: ConsoleSessions
    tenants: Tenants
    users: Users
    api_keys: ApiKeys
    access_ends: AccessEnds
    audit: AuditLog


def create_app(settings: GatewaySettings) -> FastAPI:
    """The gateway, wired: identity, the proxy to the services and to instance URLs, the
    console, its schedules and its middleware (outermost last)."""
    runtime = ServiceRuntime(settings, kafka_access=ACCESS["gateway"], indexes=INDEXES)
    signer = runtime.identity_signer()
    _check_keys(settings, runtime)
    identity = _identity(settings, runtime)
    # API calls, the API's streams (logs read and followed: a pool of their own, so a
    # flood of them takes no connection an API call needs, review N8), instance URLs.
    api_upstream, stream_upstream, instance_upstream = (
        Upstream(connect_timeout_s=settings.upstream_connect_timeout_s, read_timeout_s=read_s,
                 egress=settings.egress, max_connections=connections)
        for read_s, connections in (
            (settings.upstream_read_timeout_s, 512), (settings.upstream_read_timeout_s, 256),
            (settings.instance_read_timeout_s, 512),
        )
    )  # fmt: skip
    forwarder = Forwarder(settings, api_upstream, signer, streams=stream_upstream)
    projects = Projects(identity.tenants, identity.users, UserStore(runtime.db))
    invitations = Invitations(
        InvitationStore(runtime.db), identity.users, UserStore(runtime.db), TenantStore(runtime.db),
        SsoStore(runtime.db), projects,
    )  # fmt: skip
    sso = _single_sign_on(settings, runtime, identity, invitations, projects)
    service_load = ServiceLoad(settings, api_upstream, signer)
    connections = LongConnections(settings)
    spent_links = SpentLinkStore(runtime.db)
    targets = InstanceTargets(settings, instance_upstream, signer)
    links = SessionLinks(settings, identity.authenticator, identity.sessions, targets, spent_links)
    instance_proxy = InstanceProxy(
        settings, identity.authenticator, identity.authorizer, instance_upstream, targets, links,
        service_load, connections,
    )  # fmt: skip
    _schedule(settings, runtime, identity, service_load, spent_links)
    runtime.on_stop(api_upstream.close)
    runtime.on_stop(stream_upstream.close)
    runtime.on_stop(instance_upstream.close)
    app = runtime.create_app(
        title="gpucloud",
        description="GPU cloud control plane: the public API. The whole platform's "
        "API is described at /v1/openapi.json.",
        # The console's catch-all goes last: every API route is matched before it.
        routers=[
            router, members_router, sso_router, projects_router, forward_router,
            console_router(settings),
        ],
        parts=[
            identity.authenticator, identity.authorizer, identity.sessions, identity.console,
            identity.tenants, identity.users, identity.api_keys, identity.audit, links,
            invitations, sso, projects,
            InstanceTunnels(identity.authenticator, identity.authorizer, targets,
                            identity.audit, connections),
            OpenApiAggregator(api_upstream, forwarder.base_urls),
            forwarder,
        ],
    )  # fmt: skip
    app.add_exception_handler(RelayedProblem, _relay_problem)
    app.add_middleware(AuditMiddleware, audit=identity.audit)
    # Inside InstanceHosts: a workload's own answers through its URL keep their headers.
    app.add_middleware(SecurityHeaders, served_over_tls=settings.served_over_tls)
    app.add_middleware(InstanceHosts, proxy=instance_proxy)
    # Outermost: an address that keeps failing authentication reaches nothing (review M8).
    app.add_middleware(AddressGuard, settings=settings, limiter=identity.limiter)
    return app


def _schedule(
    settings: GatewaySettings, runtime: ServiceRuntime, identity: Identity,
    service_load: ServiceLoad, spent_links: SpentLinkStore,
) -> None:  # fmt: skip
    """What runs at start and now and then: the bootstrap admin, the outboxes' sweeps,
    the services' load reports, expired sessions and spent links."""

    async def start() -> None:
        if settings.bootstrap_admin_key is not None:
            key = settings.bootstrap_admin_key.get_secret_value()
            await identity.authenticator.install_bootstrap_admin(key)
        await identity.tenants.republish(settled=False)  # nothing of this process publishes yet

    async def sweep_outboxes() -> None:
        """Tenant and audit events that did not get out at write time go out here."""
        await identity.tenants.republish()
        await identity.audit.republish()
        await identity.access_ends.republish()

    async def sweep_spent_links() -> None:
        await spent_links.delete_expired(now())

    runtime.on_start(start)
    runtime.every(settings.outbox_sweep_s, sweep_outboxes, "outbox")
    runtime.every(settings.service_load_report_s, service_load.report, "service-load")
    runtime.every(3600.0, identity.console.sweep_expired, "console-sessions")
    runtime.every(3600.0, sweep_spent_links, "spent-session-links")


def _single_sign_on(
    settings: GatewaySettings, runtime: ServiceRuntime, identity: Identity,
    invitations: Invitations, projects: Projects,
) -> SingleSignOn:  # fmt: skip
    """Tenants' OpenID Connect providers, dialled through the outbound guard: a tenant
    admin names them."""
    guard = OutboundGuard(
        field="issuer", allow_private_networks=False, loopback_only=settings.egress.loopback_only,
        allowed_networks=tuple(settings.sso_allowed_networks),
    )  # fmt: skip
    oidc = OidcClient(guard, require_https=not settings.egress.loopback_only)
    store = SsoStore(runtime.db)
    sso = SingleSignOn(
        settings, store, oidc,
        SsoAccounts(
            store, identity.users, UserStore(runtime.db), identity.authenticator, invitations,
            projects,
        ),
    )  # fmt: skip
    runtime.on_stop(oidc.close)
    runtime.every(60.0, sso.sweep_expired, "sso-sign-ins")
    return sso


def _check_keys(settings: GatewaySettings, runtime: ServiceRuntime) -> None:
    """The session secret and the bootstrap admin key must be strong before it starts."""
    runtime.check_key_at_start(
        lambda: require_strong_key(
            settings.session_secret.get_secret_value(), setting="GPUCLOUD_SESSION_SECRET"
        )
    )
    if settings.bootstrap_admin_key is not None:
        bootstrap_key = settings.bootstrap_admin_key.get_secret_value()
        runtime.check_key_at_start(lambda: credentials.check_bootstrap_key(bootstrap_key))


def _identity(settings: GatewaySettings, runtime: ServiceRuntime) -> Identity:
    tenant_store, user_store, key_store = (
        TenantStore(runtime.db),
        UserStore(runtime.db),
        ApiKeyStore(runtime.db),
    )
    background, limiter = Background(), RateLimiter()
    cache = IdentityCache(key_store, user_store, tenant_store, ttl_s=settings.auth_cache_ttl_s)
    authenticator = Authenticator(settings, key_store, cache, background)
    sessions = Sessions(settings, user_store, authenticator, limiter, SsoStore(runtime.db))
    access_ends = AccessEnds(user_store, runtime.broker, source=runtime.source)
    api_keys = ApiKeys(key_store, cache, access_ends)
    users = Users(user_store, cache, api_keys, access_ends)
    return Identity(
        limiter=limiter,
        authenticator=authenticator,
        authorizer=Authorizer(settings, cache, limiter),
        sessions=sessions,
        console=ConsoleSessions(settings, ConsoleSessionStore(runtime.db), authenticator, sessions),
        tenants=Tenants(
            settings, tenant_store, cache, users, api_keys, runtime.broker, source=runtime.source
        ),
        users=users,
        api_keys=api_keys,
        access_ends=access_ends,
        audit=AuditLog(
            AuditStore(runtime.db),
            runtime.broker,
            source=runtime.source,
            spawn=background.spawn,
            users=user_store,
            keys=key_store,
        ),
    )


async def _relay_problem(_request: Request, problem: Exception) -> Response:
    assert isinstance(problem, RelayedProblem)
    return problem.response
