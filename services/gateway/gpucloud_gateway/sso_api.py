"""The gateway's routes of single sign-on: a tenant admin's configuration, the
browser's way through the provider (start, then the provider's callback), and the
CLI's (a device code, then polls)."""

from __future__ import annotations

import html
from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, Response, status
from fastapi.responses import HTMLResponse, RedirectResponse

from gpucloud_libs.http import app_part

from .access import SessionsPart, audit_target, require
from .console_sessions import ConsoleSessions
from .invitations import Invitations
from .routes import TENANT_ADMIN
from .schemas import InvitationToken, Principal
from .sso import SIGN_IN_TTL, SingleSignOn
from .sso_schemas import (
    SsoConfig,
    SsoConfigSet,
    SsoDevicePoll,
    SsoDeviceResult,
    SsoDeviceStarted,
    SsoJoinStarted,
)

router = APIRouter(prefix="/v1")

SsoPart = Annotated[SingleSignOn, app_part(SingleSignOn)]
ConsolePart = Annotated[ConsoleSessions, app_part(ConsoleSessions)]
InvitationsPart = Annotated[Invitations, app_part(Invitations)]
TenantId = Annotated[str, Path(max_length=32)]
#: Where a signed-in browser lands.
CONSOLE_HOME = "/instances"
#: A CLI's token lives long enough to mint its API key.
CLI_TOKEN_TTL_S = 600


@router.put(
    "/tenant/sso",
    tags=["sso"],
    summary="Set your tenant's single sign-on: its OpenID Connect provider (checked by "
    "discovery), client, and which groups get which role (tenant admin)",
)
async def set_sso(
    body: SsoConfigSet, sso: SsoPart,
    principal: Annotated[Principal, require(TENANT_ADMIN, "admin:write")],
) -> SsoConfig:  # fmt: skip
    return await sso.configure(principal, body)


@router.get("/tenant/sso", tags=["sso"], summary="Your tenant's single sign-on (no secret)")
async def get_sso(
    sso: SsoPart, principal: Annotated[Principal, require(TENANT_ADMIN, "admin:read")]
) -> SsoConfig:
    return await sso.config(principal)


@router.delete(
    "/tenant/sso", tags=["sso"], status_code=status.HTTP_204_NO_CONTENT,
    summary="Turn single sign-on off for your tenant (tenant admin)",
)  # fmt: skip
async def delete_sso(
    sso: SsoPart, principal: Annotated[Principal, require(TENANT_ADMIN, "admin:write")]
) -> Response:
    await sso.remove(principal)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get(
    "/sso/{tenant_id}/start", tags=["sso"], status_code=status.HTTP_302_FOUND,
    summary="Sign in to the console through the tenant's provider (a browser's redirect)",
)  # fmt: skip
async def start_sso(
    tenant_id: TenantId, request: Request, sso: SsoPart, sessions: SessionsPart
) -> RedirectResponse:
    sessions.limit_sign_ins(request)
    begun = await sso.start(tenant_id)
    redirect = RedirectResponse(begun.provider_url, status_code=status.HTTP_302_FOUND)
    _bind_to_browser(redirect, sso, begun.browser_secret)
    return redirect


@router.post(
    "/invitations/sso", tags=["sso"],
    summary="Accept an invitation by signing in through the tenant's provider: where the "
    "browser goes (no credential: the link's secret is one)",
)  # fmt: skip
async def join_by_sso(
    body: InvitationToken, request: Request, response: Response, sso: SsoPart,
    sessions: SessionsPart, invitations: InvitationsPart,
) -> SsoJoinStarted:  # fmt: skip
    sessions.limit_sign_ins(request)
    invitation, _ = await invitations.usable(body.token)
    begun = await sso.start(invitation["tenant_id"], invitation["_id"])
    _bind_to_browser(response, sso, begun.browser_secret)
    return SsoJoinStarted(provider_url=begun.provider_url)


@router.post(
    "/invitations/sso-device", tags=["sso"], status_code=status.HTTP_201_CREATED,
    summary="Accept an invitation from the CLI by signing in through the tenant's provider: "
    "a code to enter there (no credential: the link's secret is one)",
)  # fmt: skip
async def join_by_sso_device(
    body: InvitationToken, request: Request, sso: SsoPart, sessions: SessionsPart,
    invitations: InvitationsPart,
) -> SsoDeviceStarted:  # fmt: skip
    sessions.limit_sign_ins(request)
    invitation, _ = await invitations.usable(body.token)
    return await sso.start_device(invitation["tenant_id"], invitation["_id"])


def _bind_to_browser(response: Response, sso: SingleSignOn, browser_secret: str) -> None:
    """The cookie that binds a sign-in to the browser that began it: sent back on the
    provider's top-level redirect (SameSite Lax), `__Host-` where Secure (no subdomain
    can set it)."""
    response.set_cookie(
        sso.cookie_name, browser_secret, max_age=int(SIGN_IN_TTL.total_seconds()),
        path="/", secure=sso.cookie_secure, httponly=True, samesite="lax",
    )  # fmt: skip


@router.get(
    "/sso/callback", tags=["sso"], response_class=HTMLResponse,
    summary="Where the provider sends the browser back: the console session begins",
)  # fmt: skip
async def sso_callback(
    request: Request, sso: SsoPart, console: ConsolePart,
    state: Annotated[str, Query(max_length=256)],
    code: Annotated[str | None, Query(max_length=2048)] = None,
    error: Annotated[str | None, Query(max_length=256)] = None,
) -> HTMLResponse:  # fmt: skip
    user = await sso.finish(state, code, error, request.cookies.get(sso.cookie_name))
    # A page of this origin moves on to the console: the session cookie is SameSite
    # Strict, and a redirect chain begun at the provider's site would not carry it.
    page = HTMLResponse(
        f'<!doctype html><meta http-equiv="refresh" content="0;url={html.escape(CONSOLE_HOME)}">'
        f'<p>Signed in as {html.escape(user["email"])}. <a href="{CONSOLE_HOME}">Continue</a></p>'
    )
    page.delete_cookie(
        sso.cookie_name, path="/", secure=sso.cookie_secure, httponly=True, samesite="lax"
    )
    session = await console.open_for_user(user, page, sso=True)
    audit_target(request, session.principal)
    return page


@router.post(
    "/sso/{tenant_id}/device", tags=["sso"], status_code=status.HTTP_201_CREATED,
    summary="Begin a CLI's sign-in through the tenant's provider: a code to enter there",
)  # fmt: skip
async def start_device_sso(
    tenant_id: TenantId, request: Request, sso: SsoPart, sessions: SessionsPart
) -> SsoDeviceStarted:
    sessions.limit_sign_ins(request)
    return await sso.start_device(tenant_id)


@router.post(
    "/sso/device/token", tags=["sso"],
    summary="Poll a CLI's sign-in: pending, or a short-lived token once the user approved",
)  # fmt: skip
async def poll_device_sso(
    body: SsoDevicePoll, request: Request, sso: SsoPart, sessions: SessionsPart
) -> SsoDeviceResult:
    sessions.limit_sign_ins(request)
    outcome = await sso.poll_device(body.poll_token)
    if isinstance(outcome, int):
        return SsoDeviceResult(status="pending", interval=outcome)
    issued = sessions.user_token(outcome, CLI_TOKEN_TTL_S, sso=True)
    return SsoDeviceResult(
        status="signed_in", email=outcome["email"], token=issued.token,
        expires_at=issued.expires_at,
    )  # fmt: skip
