"""The gateway's routes of single sign-on: a tenant admin's configuration, and the
browser's way through the provider (start, then the provider's callback)."""

from __future__ import annotations

import html
from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, Response, status
from fastapi.responses import HTMLResponse, RedirectResponse

from gpucloud_libs.http import app_part

from .access import audit_target, require
from .console_sessions import ConsoleSessions
from .routes import TENANT_ADMIN
from .schemas import Principal, SsoConfig, SsoConfigSet
from .sso import SingleSignOn

router = APIRouter(prefix="/v1")

SsoPart = Annotated[SingleSignOn, app_part(SingleSignOn)]
ConsolePart = Annotated[ConsoleSessions, app_part(ConsoleSessions)]
#: Where a signed-in browser lands.
CONSOLE_HOME = "/instances"


@router.put(
    "/tenant/sso",
    tags=["sso"],
    summary="Set your tenant's single sign-on: its OpenID Connect provider (checked by "
    "discovery), client, and which groups get which role (tenant admin)",
)
async def set_sso(
    body: SsoConfigSet, request: Request, sso: SsoPart,
    principal: Annotated[Principal, require(TENANT_ADMIN, "admin:write")],
) -> SsoConfig:  # fmt: skip
    return await sso.configure(principal, body, str(request.base_url))


@router.get("/tenant/sso", tags=["sso"], summary="Your tenant's single sign-on (no secret)")
async def get_sso(
    request: Request, sso: SsoPart,
    principal: Annotated[Principal, require(TENANT_ADMIN, "admin:read")],
) -> SsoConfig:  # fmt: skip
    return await sso.config(principal, str(request.base_url))


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
    tenant_id: Annotated[str, Path(max_length=32)], request: Request, sso: SsoPart
) -> RedirectResponse:
    url = await sso.start(tenant_id, str(request.base_url))
    return RedirectResponse(url, status_code=status.HTTP_302_FOUND)


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
    user = await sso.finish(state, code, error)
    # A page of this origin moves on to the console: the session cookie is SameSite
    # Strict, and a redirect chain begun at the provider's site would not carry it.
    page = HTMLResponse(
        f'<!doctype html><meta http-equiv="refresh" content="0;url={html.escape(CONSOLE_HOME)}">'
        f'<p>Signed in as {html.escape(user["email"])}. <a href="{CONSOLE_HOME}">Continue</a></p>'
    )
    session = await console.open_for_user(user, page)
    audit_target(request, session.principal)
    return page
