"""The gateway's proxy routes: instance session links, the aggregated OpenAPI document,
and the forwarding of every other /v1 route to the service that owns it. Registered
after api.py's routes, so the catch-all comes last."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Request, Response, WebSocket

from gpucloud_libs.errors import GpucloudError, NotFound
from gpucloud_libs.http import app_part, problem_response

from . import routes
from .access import (
    AuthenticatorPart,
    AuthorizerPart,
    ConsoleSessionsPart,
    Credentials,
    audit_target,
    authenticated,
    require,
)
from .forwarding import Forwarder
from .instance_links import SessionLinks
from .openapi import OpenApiAggregator
from .routes import TENANT_MEMBERS
from .schemas import InstanceSession, Principal
from .tunnels import InstanceTunnels

router = APIRouter(prefix="/v1")

SessionLinksPart = Annotated[SessionLinks, app_part(SessionLinks)]
InstanceTunnelsPart = Annotated[InstanceTunnels, app_part(InstanceTunnels)]
OpenApiPart = Annotated[OpenApiAggregator, app_part(OpenApiAggregator)]
ForwarderPart = Annotated[Forwarder, app_part(Forwarder)]


class MethodNotAllowed(GpucloudError):
    status = 405
    code = "method_not_allowed"
    title = "Method not allowed"


# --- instance URLs --------------------------------------------------------------------


@router.post(
    "/gpu-instances/{instance_id}/ports/{port}/session",
    tags=["instances"],
    summary="A one-minute link that opens an instance URL in a browser (sets its cookie)",
)
async def open_instance(
    instance_id: Annotated[str, Path(max_length=64)],
    port: Annotated[int, Path(ge=1, le=65535)],
    links: SessionLinksPart,
    principal: Annotated[Principal, require(TENANT_MEMBERS, "instances:connect")],
) -> InstanceSession:
    return await links.open(principal, instance_id, port)


@router.websocket("/gpu-instances/{instance_id}/ports/{port}/tunnel")
async def tunnel_to_instance(
    socket: WebSocket,
    instance_id: Annotated[str, Path(max_length=64)],
    port: Annotated[int, Path(ge=1, le=65535)],
    tunnels: InstanceTunnelsPart,
) -> None:
    """A TCP tunnel to one declared port of a running instance (`gpucloud ssh`)."""
    await tunnels.serve(socket, instance_id, port)


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
    credentials: Credentials,
    authenticator: AuthenticatorPart,
    console: ConsoleSessionsPart,
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
    principal = await authenticated(request, credentials, authenticator, console)
    route = found.route
    audit_target(request, principal, route.path)
    await authorizer.authorize(
        principal, roles=route.roles, scope=route.scope, method=request.method
    )
    return await forwarder.forward(request, principal, route)
