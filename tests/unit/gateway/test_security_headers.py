"""The headers on every answer of the gateway's own (security_headers.py): never framed,
never sniffed, API answers never cached unless they say otherwise, and HSTS only where
the gateway is reached over TLS; an answer's own choice of these headers stands."""

from __future__ import annotations

import httpx
import pytest
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from gpucloud_gateway.security_headers import HSTS, SecurityHeaders


async def _app(scope: Scope, receive: Receive, send: Send) -> None:
    """`/…/own-headers` answers with headers of its own; every other path with none."""
    request = Request(scope, receive)
    headers = (
        {"cache-control": "public, max-age=60", "x-frame-options": "SAMEORIGIN",
         "strict-transport-security": "max-age=60"}
        if request.url.path.endswith("/own-headers")
        else {}
    )  # fmt: skip
    await Response("ok", headers=headers)(scope, receive, send)


async def _get(path: str, *, served_over_tls: bool, scheme: str = "http") -> httpx.Response:
    app = SecurityHeaders(_app, served_over_tls=served_over_tls)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=f"{scheme}://gw") as client:
        return await client.get(path)


@pytest.mark.parametrize("path", ["/v1/gpu-instances", "/", "/assets/app.js", "/healthz"])
async def test_no_answer_is_framed_or_sniffed(path: str) -> None:
    answer = await _get(path, served_over_tls=False)
    assert answer.headers["x-frame-options"] == "DENY"
    assert answer.headers["x-content-type-options"] == "nosniff"


async def test_an_api_answer_is_not_stored_and_a_console_page_is_left_to_itself() -> None:
    assert (await _get("/v1/api-keys", served_over_tls=False)).headers["cache-control"] == (
        "no-store"
    )
    for path in ("/", "/v1", "/v1x/things", "/docs"):
        assert "cache-control" not in (await _get(path, served_over_tls=False)).headers, path


async def test_an_answers_own_headers_stand() -> None:
    answer = await _get("/v1/own-headers", served_over_tls=True)
    assert answer.headers["cache-control"] == "public, max-age=60"
    assert answer.headers["x-frame-options"] == "SAMEORIGIN"
    assert answer.headers["strict-transport-security"] == "max-age=60"
    assert answer.headers.get_list("x-frame-options") == ["SAMEORIGIN"]


@pytest.mark.parametrize(
    ("served_over_tls", "scheme", "hsts"),
    [(True, "http", True), (False, "https", True), (False, "http", False)],
)
async def test_hsts_is_sent_only_where_the_gateway_is_reached_over_tls(
    served_over_tls: bool, scheme: str, hsts: bool
) -> None:
    """Behind an ingress that terminates TLS the gateway itself sees http: the setting
    says so."""
    answer = await _get("/v1/specs", served_over_tls=served_over_tls, scheme=scheme)
    assert answer.headers.get("strict-transport-security") == (HSTS if hsts else None)


async def test_what_is_not_http_passes_through_untouched() -> None:
    seen: list[tuple[str, Send]] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append((scope["type"], send))

    async def receive() -> Message:
        return {"type": "websocket.connect"}

    async def send(message: Message) -> None:
        return None

    await SecurityHeaders(app, served_over_tls=True)(
        {"type": "websocket", "path": "/v1/tunnels", "headers": []}, receive, send
    )
    assert seen == [("websocket", send)]
