"""What spends an address's failed-authentication bucket: a credential the gateway
itself refused, never a workload's own 401 through its URL, nor a request that
presented nothing."""

from __future__ import annotations

import httpx
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from gpucloud_gateway.address_guard import AddressGuard
from gpucloud_gateway.ratelimit import RateLimiter
from gpucloud_gateway.settings import GatewaySettings
from gpucloud_libs.errors import Unauthenticated
from gpucloud_libs.http import problem_response


async def _app(scope: Scope, receive: Receive, send: Send) -> None:
    """`/gateway`: the gateway refuses the credential; `/workload`: a workload behind an
    instance URL answers 401 itself."""
    request = Request(scope, receive)
    if request.url.path == "/gateway":
        await problem_response(Unauthenticated("the API key is unknown"), request)(
            scope, receive, send
        )
    else:
        await Response("who are you?", status_code=401)(scope, receive, send)


def _client(burst: int) -> httpx.AsyncClient:
    settings = GatewaySettings(
        failed_auths_per_address_burst=burst, failed_auths_per_address_per_s=0.001
    )
    guard = AddressGuard(_app, settings=settings, limiter=RateLimiter())
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=guard), base_url="http://gw")


async def test_only_credentials_the_gateway_refused_are_counted() -> None:
    key = {"Authorization": "Bearer gpc_made_up_000000000000000000"}
    async with _client(burst=3) as client:
        for _ in range(10):  # a workload's own 401s, and requests that present nothing
            assert (await client.get("/workload", headers=key)).status_code == 401
            assert (await client.get("/gateway")).status_code == 401
        for _ in range(3):
            assert (await client.get("/gateway", headers=key)).status_code == 401
        refused = await client.get("/workload", headers=key)
        assert refused.status_code == 429
        assert refused.headers["content-type"].startswith("application/problem+json")
