"""Public HTTP routes of the gateway: its own (identity, tenants, audit) and the
forwarding of every other /v1 route to the service that owns it.

Each route states the roles and the scope it needs through `require(...)`;
the tenant always comes from the caller's credential, never from the body.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request, Response, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from gpucloud_libs.errors import GpucloudError, NotFound
from gpucloud_libs.http import app_part, problem_response
from gpucloud_libs.identity import Role

from . import routes
from .api_keys import ApiKeys
from .audit import MUTATING, AuditedCall, AuditLog
from .authentication import Authenticator
from .authorization import Authorizer
from .forwarding import Forwarder
from .instance_urls import InstanceProxy
from .openapi import OpenApiAggregator
from .routes import ADMINS, EVERYONE, PLATFORM_ADMIN, TENANT_ADMIN, TENANT_MEMBERS
from .schemas import (
    ApiKey,
    ApiKeyCreate,
    ApiKeyCreated,
    AuditPage,
    InstanceSession,
    Principal,
    Scope,
    SelfQuota,
    Tenant,
    TenantCreate,
    TenantCreated,
    TenantUpdate,
    TokenIssued,
    TokenRequest,
    User,
    UserCreate,
    UserUpdate,
)
from .sessions import Sessions
from .tenants import Tenants
from .users import Users

router = APIRouter(prefix="/v1")
_bearer = HTTPBearer(
    auto_error=False,
    description="An API key (`gpc_...`) or a token from POST /v1/tokens (`gpt_...`).",
)
Limit = Annotated[int, Query(ge=1, le=500)]
After = Annotated[str | None, Query(max_length=128, description="The last id of the previous page")]


class MethodNotAllowed(GpucloudError):
    status = 405
    code = "method_not_allowed"
    title = "Method not allowed"


AuthenticatorPart = Annotated[Authenticator, app_part(Authenticator)]
AuthorizerPart = Annotated[Authorizer, app_part(Authorizer)]
SessionsPart = Annotated[Sessions, app_part(Sessions)]
TenantsPart = Annotated[Tenants, app_part(Tenants)]
UsersPart = Annotated[Users, app_part(Users)]
ApiKeysPart = Annotated[ApiKeys, app_part(ApiKeys)]
AuditPart = Annotated[AuditLog, app_part(AuditLog)]
InstanceProxyPart = Annotated[InstanceProxy, app_part(InstanceProxy)]
OpenApiPart = Annotated[OpenApiAggregator, app_part(OpenApiAggregator)]
ForwarderPart = Annotated[Forwarder, app_part(Forwarder)]


async def _authenticated(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    authenticator: AuthenticatorPart,
) -> Principal:
    principal = await authenticator.authenticate(credentials.credentials if credentials else None)
    request.state.principal = principal
    return principal


def _audit_target(request: Request, principal: Principal, template: str | None = None) -> None:
    """Mark a mutating call for the audit log; recorded with its result status."""
    if request.method in MUTATING:
        template = template or getattr(request.scope.get("route"), "path", request.url.path)
        tenant_id = principal.tenant_id or request.path_params.get("tenant_id")
        request.state.audit = AuditedCall(
            principal, tenant_id, f"{request.method} {template}", request.url.path
        )


def require(roles: frozenset[Role], scope: Scope | None) -> Any:
    """A dependency: the caller, once authenticated, audited and allowed this route."""

    async def dependency(
        request: Request,
        principal: Annotated[Principal, Depends(_authenticated)],
        authorizer: AuthorizerPart,
    ) -> Principal:
        _audit_target(request, principal)
        if scope is None:
            await authorizer.rate_limit(principal)
        else:
            await authorizer.authorize(principal, roles=roles, scope=scope, method=request.method)
        return principal

    return Depends(dependency)


# --- identity -------------------------------------------------------------------------


@router.get("/whoami", tags=["identity"], summary="The identity behind the presented credential")
async def whoami(principal: Annotated[Principal, require(EVERYONE, None)]) -> Principal:
    return principal


async def _maybe_authenticated(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    authenticator: AuthenticatorPart,
) -> Principal | None:
    return await _authenticated(request, credentials, authenticator) if credentials else None


@router.post(
    "/tokens",
    tags=["identity"],
    summary="A short-lived token: sign in with email and password, or exchange an API key",
    status_code=status.HTTP_201_CREATED,
)
async def issue_token(
    body: TokenRequest,
    request: Request,
    sessions: SessionsPart,
    principal: Annotated[Principal | None, Depends(_maybe_authenticated)],
) -> TokenIssued:
    if principal is not None:
        _audit_target(request, principal)
    return await sessions.issue(body, principal)


# --- tenants (platform admin) ---------------------------------------------------------


@router.post(
    "/tenants",
    tags=["tenants"],
    status_code=status.HTTP_201_CREATED,
    summary="Create a tenant with its first admin and that admin's first API key",
)
async def create_tenant(
    body: TenantCreate,
    request: Request,
    tenants: TenantsPart,
    principal: Annotated[Principal, require(PLATFORM_ADMIN, "admin:write")],
) -> TenantCreated:
    request.state.audit = AuditedCall(principal, body.tenant_id, "POST /v1/tenants", "/v1/tenants")
    return await tenants.create(body)


@router.get("/tenants", tags=["tenants"], summary="List tenants (platform admin)")
async def list_tenants(
    tenants: TenantsPart,
    _: Annotated[Principal, require(PLATFORM_ADMIN, "admin:read")],
    after: After = None,
    limit: Limit = 100,
) -> list[Tenant]:
    return await tenants.list(after=after, limit=limit)


TenantIdPath = Annotated[str, Path(max_length=64)]


@router.get("/tenants/{tenant_id}", tags=["tenants"], summary="One tenant (platform admin)")
async def get_tenant(
    tenant_id: TenantIdPath,
    tenants: TenantsPart,
    _: Annotated[Principal, require(PLATFORM_ADMIN, "admin:read")],
) -> Tenant:
    return await tenants.get(tenant_id)


@router.patch(
    "/tenants/{tenant_id}",
    tags=["tenants"],
    summary="Change a tenant's name, status, limits or rate limit (platform admin)",
)
async def update_tenant(
    tenant_id: TenantIdPath,
    body: TenantUpdate,
    tenants: TenantsPart,
    _: Annotated[Principal, require(PLATFORM_ADMIN, "admin:write")],
) -> Tenant:
    return await tenants.update(tenant_id, body)


@router.delete(
    "/tenants/{tenant_id}",
    tags=["tenants"],
    status_code=status.HTTP_204_NO_CONTENT,
    summary="Delete a tenant: its keys are revoked and the services told (platform admin)",
)
async def delete_tenant(
    tenant_id: TenantIdPath,
    tenants: TenantsPart,
    _: Annotated[Principal, require(PLATFORM_ADMIN, "admin:write")],
) -> Response:
    await tenants.delete(tenant_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


# --- the caller's own tenant ----------------------------------------------------------


@router.get("/tenant", tags=["tenants"], summary="Your tenant, with its limits and quota")
async def own_tenant(
    tenants: TenantsPart, principal: Annotated[Principal, require(TENANT_MEMBERS, "admin:read")]
) -> Tenant:
    assert principal.tenant_id is not None
    return await tenants.get(principal.tenant_id)


@router.put(
    "/tenant/quota",
    tags=["tenants"],
    summary="Set your tenant's own quota, within the platform's limits (tenant admin)",
)
async def set_own_quota(
    body: SelfQuota,
    tenants: TenantsPart,
    principal: Annotated[Principal, require(TENANT_ADMIN, "admin:write")],
) -> Tenant:
    assert principal.tenant_id is not None
    return await tenants.set_self_quota(principal.tenant_id, body)


# --- users ----------------------------------------------------------------------------

UserIdPath = Annotated[str, Path(max_length=64)]


@router.post(
    "/users",
    tags=["users"],
    status_code=status.HTTP_201_CREATED,
    summary="Add a user to your tenant (tenant admin), or a platform admin (platform admin)",
)
async def create_user(
    body: UserCreate,
    users: UsersPart,
    principal: Annotated[Principal, require(ADMINS, "admin:write")],
) -> User:
    return await users.create(principal, body)


@router.get("/users", tags=["users"], summary="Users of your tenant (or the platform admins)")
async def list_users(
    users: UsersPart,
    principal: Annotated[Principal, require(ADMINS, "admin:read")],
    after: After = None,
    limit: Limit = 100,
) -> list[User]:
    return await users.list(principal, after=after, limit=limit)


@router.get("/users/{user_id}", tags=["users"], summary="One user")
async def get_user(
    user_id: UserIdPath,
    users: UsersPart,
    principal: Annotated[Principal, require(ADMINS, "admin:read")],
) -> User:
    return await users.get(principal, user_id)


@router.patch(
    "/users/{user_id}",
    tags=["users"],
    summary="Change a user's name, role, status or password; disabling revokes their keys",
)
async def update_user(
    user_id: UserIdPath,
    body: UserUpdate,
    users: UsersPart,
    principal: Annotated[Principal, require(ADMINS, "admin:write")],
) -> User:
    return await users.update(principal, user_id, body)


@router.delete(
    "/users/{user_id}",
    tags=["users"],
    status_code=status.HTTP_204_NO_CONTENT,
    summary="Remove a user and revoke their keys",
)
async def delete_user(
    user_id: UserIdPath,
    users: UsersPart,
    principal: Annotated[Principal, require(ADMINS, "admin:write")],
) -> Response:
    await users.delete(principal, user_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


# --- API keys -------------------------------------------------------------------------

KeyIdPath = Annotated[str, Path(max_length=64)]


@router.post(
    "/api-keys",
    tags=["api-keys"],
    status_code=status.HTTP_201_CREATED,
    summary="Create an API key for yourself; its secret is shown once",
)
async def create_key(
    body: ApiKeyCreate,
    api_keys: ApiKeysPart,
    principal: Annotated[Principal, require(EVERYONE, "admin:write")],
) -> ApiKeyCreated:
    return await api_keys.create(principal, body)


@router.get(
    "/api-keys",
    tags=["api-keys"],
    summary="Your keys; an admin sees every key of the tenant (or of the platform)",
)
async def list_keys(
    api_keys: ApiKeysPart,
    principal: Annotated[Principal, require(EVERYONE, "admin:read")],
    after: After = None,
    limit: Limit = 100,
) -> list[ApiKey]:
    return await api_keys.list(principal, after=after, limit=limit)


@router.get("/api-keys/{key_id}", tags=["api-keys"], summary="One API key (never its secret)")
async def get_key(
    key_id: KeyIdPath,
    api_keys: ApiKeysPart,
    principal: Annotated[Principal, require(EVERYONE, "admin:read")],
) -> ApiKey:
    return await api_keys.get(principal, key_id)


@router.delete(
    "/api-keys/{key_id}", tags=["api-keys"], summary="Revoke an API key; it stops working at once"
)
async def revoke_key(
    key_id: KeyIdPath,
    api_keys: ApiKeysPart,
    principal: Annotated[Principal, require(EVERYONE, "admin:write")],
) -> ApiKey:
    return await api_keys.revoke(principal, key_id)


# --- audit ----------------------------------------------------------------------------


@router.get(
    "/audit",
    tags=["audit"],
    summary="The audit log, newest first: your tenant's, or any tenant's for a platform admin",
)
async def audit_log(
    audit: AuditPart,
    principal: Annotated[Principal, require(ADMINS, "admin:read")],
    tenant_id: Annotated[
        str | None, Query(alias="tenantID", max_length=64, description="Platform admin only")
    ] = None,
    since: datetime | None = None,
    cursor: Annotated[str | None, Query(max_length=256)] = None,
    limit: Limit = 100,
) -> AuditPage:
    return await audit.page(principal, tenant_id=tenant_id, since=since, cursor=cursor, limit=limit)


# --- instance URLs --------------------------------------------------------------------


@router.post(
    "/gpu-instances/{instance_id}/ports/{port}/session",
    tags=["instances"],
    summary="A one-minute link that opens an instance URL in a browser (sets its cookie)",
)
async def open_instance(
    instance_id: Annotated[str, Path(max_length=64)],
    port: Annotated[int, Path(ge=1, le=65535)],
    proxy: InstanceProxyPart,
    principal: Annotated[Principal, require(TENANT_MEMBERS, "instances:connect")],
) -> InstanceSession:
    return await proxy.open_session(principal, instance_id, port)


# --- the aggregated API description and forwarding ------------------------------------


@router.get(
    "/openapi.json",
    tags=["meta"],
    summary="The OpenAPI document of the whole public API",
    response_model=None,
)
async def openapi(request: Request, aggregator: OpenApiPart) -> dict[str, Any]:
    return await aggregator.document(request.app.openapi())


@router.api_route(
    "/{path:path}",
    methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
    include_in_schema=False,
)
async def forward(
    path: str,
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    authenticator: AuthenticatorPart,
    authorizer: AuthorizerPart,
    forwarder: ForwarderPart,
) -> Response:
    found = routes.match(request.method, request.url.path)
    if found.route is None:
        if found.allowed:
            problem = MethodNotAllowed(f"{request.url.path} allows {', '.join(found.allowed)}")
            response = problem_response(problem, request)
            response.headers["Allow"] = ", ".join(found.allowed)
            return response
        raise NotFound(f"no API route {request.url.path}")
    principal = await _authenticated(request, credentials, authenticator)
    route = found.route
    _audit_target(request, principal, route.path)
    await authorizer.authorize(
        principal, roles=route.roles, scope=route.scope, method=request.method
    )
    return await forwarder.forward(request, principal, route)
