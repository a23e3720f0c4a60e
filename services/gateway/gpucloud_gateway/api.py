"""The gateway's own public routes: identity, tenants, users, API keys and the audit log.
Every other /v1 route is forwarded (forward_api.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request, Response, status

from gpucloud_libs.http import app_part

from .access import SessionsPart, audit_target, maybe_authenticated, require
from .api_keys import ApiKeys
from .audit import AuditedCall, AuditLog
from .authorization import refuse_machine_key
from .console_sessions import ConsoleSessions
from .routes import ADMINS, EVERYONE, PLATFORM_ADMIN, TENANT_ADMIN, TENANT_MEMBERS
from .schemas import (
    ApiKey,
    ApiKeyCreate,
    ApiKeyCreated,
    AuditPage,
    ConsoleSession,
    ConsoleSignIn,
    Principal,
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
from .tenants import Tenants
from .users import Users

router = APIRouter(prefix="/v1")
Limit = Annotated[int, Query(ge=1, le=500)]
After = Annotated[str | None, Query(max_length=128, description="The last id of the previous page")]


TenantsPart = Annotated[Tenants, app_part(Tenants)]
UsersPart = Annotated[Users, app_part(Users)]
ApiKeysPart = Annotated[ApiKeys, app_part(ApiKeys)]
AuditPart = Annotated[AuditLog, app_part(AuditLog)]
ConsolePart = Annotated[ConsoleSessions, app_part(ConsoleSessions)]


# --- identity -------------------------------------------------------------------------


@router.get("/whoami", tags=["identity"], summary="The identity behind the presented credential")
async def whoami(principal: Annotated[Principal, require(EVERYONE, None)]) -> Principal:
    return principal


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
    principal: Annotated[Principal | None, Depends(maybe_authenticated)],
) -> TokenIssued:
    if principal is not None:
        audit_target(request, principal)
        refuse_machine_key(principal)
    return await sessions.issue(body, principal, request)


# --- the web console's session ---------------------------------------------------------


@router.post(
    "/console/session",
    tags=["console"],
    summary="Sign in to the web console (email and password, or an API key): sets the "
    "HttpOnly session cookie and answers the CSRF token its changes must carry",
    status_code=status.HTTP_201_CREATED,
)
async def console_sign_in(
    body: ConsoleSignIn, request: Request, response: Response, console: ConsolePart
) -> ConsoleSession:
    session = await console.sign_in(body, response, request)
    audit_target(request, session.principal)
    return session


@router.get(
    "/console/session",
    tags=["console"],
    summary="The console session of the cookie: who it acts as, and its CSRF token",
)
async def console_session(request: Request, console: ConsolePart) -> ConsoleSession:
    return await console.current(request)


@router.delete(
    "/console/session",
    tags=["console"],
    summary="Sign out of the console: the session ends at once, on every gateway replica",
    status_code=status.HTTP_204_NO_CONTENT,
)
async def console_sign_out(request: Request, response: Response, console: ConsolePart) -> None:
    await console.sign_out(request, response)


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


@router.post(
    "/tenants/{tenant_id}/users",
    tags=["tenants"],
    status_code=status.HTTP_201_CREATED,
    summary="Add a user to a tenant: a tenant admin or user (platform admin)",
)
async def add_tenant_user(
    tenant_id: TenantIdPath,
    body: UserCreate,
    request: Request,
    tenants: TenantsPart,
    users: UsersPart,
    principal: Annotated[Principal, require(PLATFORM_ADMIN, "admin:write")],
) -> User:
    path = f"/v1/tenants/{tenant_id}/users"
    request.state.audit = AuditedCall(principal, tenant_id, f"POST {path}", path)
    await tenants.get(tenant_id)  # a 404 for a tenant that does not exist
    return await users.add_to_tenant(tenant_id, body)


@router.get(
    "/tenants/{tenant_id}/users", tags=["tenants"], summary="A tenant's users (platform admin)"
)
async def list_tenant_users(
    tenant_id: TenantIdPath,
    tenants: TenantsPart,
    users: UsersPart,
    _: Annotated[Principal, require(PLATFORM_ADMIN, "admin:read")],
    after: After = None,
    limit: Limit = 100,
) -> list[User]:
    await tenants.get(tenant_id)
    return await users.of_tenant(tenant_id, after=after, limit=limit)


# --- the caller's own tenant ----------------------------------------------------------


@router.get("/tenant", tags=["tenants"], summary="Your tenant, with its limits and quota")
async def own_tenant(
    tenants: TenantsPart, principal: Annotated[Principal, require(TENANT_MEMBERS, "admin:read")]
) -> Tenant:
    assert principal.tenant_id is not None
    tenant = await tenants.get(principal.tenant_id)
    if principal.role != "tenant-admin" and principal.user_id is not None:
        # Each user's limits are the admins' to see; a user sees their own (review L4).
        mine = {k: v for k, v in tenant.user_limits.items() if k == principal.user_id}
        tenant = tenant.model_copy(update={"user_limits": mine})
    return tenant


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


@router.post(
    "/users/{user_id}/api-keys",
    tags=["users"],
    status_code=status.HTTP_201_CREATED,
    summary="Mint an API key for a user of your tenant (tenant admin); its secret is shown once",
)
async def mint_user_key(
    user_id: UserIdPath,
    body: ApiKeyCreate,
    users: UsersPart,
    principal: Annotated[Principal, require(ADMINS, "admin:write")],
) -> ApiKeyCreated:
    return await users.mint_key(principal, user_id, body)


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
