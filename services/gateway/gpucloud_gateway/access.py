"""How every gateway route learns who is calling and whether they may: the bearer
credential, the audit mark of a mutating call, roles, scopes and rate limits.

Each route states the roles and the scope it needs through `require(...)`;
the tenant always comes from the caller's credential, never from the body.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from gpucloud_libs.http import app_part
from gpucloud_libs.identity import Role

from .audit import MUTATING, AuditedCall
from .authentication import Authenticator
from .authorization import Authorizer, refuse_machine_key
from .console_sessions import ConsoleSessions
from .schemas import Principal, Scope
from .sessions import Sessions

bearer = HTTPBearer(
    auto_error=False,
    description="An API key (`gpc_...`) or a token from POST /v1/tokens (`gpt_...`).",
)
AuthenticatorPart = Annotated[Authenticator, app_part(Authenticator)]
AuthorizerPart = Annotated[Authorizer, app_part(Authorizer)]
ConsoleSessionsPart = Annotated[ConsoleSessions, app_part(ConsoleSessions)]
#: Sign-ins: every route that takes one, or limits its callers as sign-ins, uses this.
SessionsPart = Annotated[Sessions, app_part(Sessions)]
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]


async def authenticated(
    request: Request,
    credentials: Credentials,
    authenticator: AuthenticatorPart,
    console: ConsoleSessionsPart,
) -> Principal:
    """The bearer credential; without one, the web console's session cookie."""
    if credentials is None and console.presented(request):
        principal = await console.authenticate(request)
    else:
        principal = await authenticator.authenticate(
            credentials.credentials if credentials else None
        )
    request.state.principal = principal
    return principal


def audit_target(request: Request, principal: Principal, template: str | None = None) -> None:
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
        principal: Annotated[Principal, Depends(authenticated)],
        authorizer: AuthorizerPart,
    ) -> Principal:
        audit_target(request, principal)
        if scope is None:
            refuse_machine_key(principal)
            await authorizer.rate_limit(principal)
        else:
            await authorizer.authorize(principal, roles=roles, scope=scope, method=request.method)
        return principal

    return Depends(dependency)


async def maybe_authenticated(
    request: Request,
    credentials: Credentials,
    authenticator: AuthenticatorPart,
    console: ConsoleSessionsPart,
) -> Principal | None:
    if credentials is None:
        return None
    return await authenticated(request, credentials, authenticator, console)
