"""The Server-Timing header: a handler's phases reach the client, in order."""

from __future__ import annotations

import asyncio

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from gpucloud_libs.server_timing import ServerTimingMiddleware, parse, phase


async def timed(_: Request) -> PlainTextResponse:
    with phase("reads"):
        await asyncio.sleep(0.02)
    with phase("insert"):
        await asyncio.gather(asyncio.sleep(0))  # phases marked from any await
    return PlainTextResponse("ok")


async def untimed(_: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


async def test_a_handlers_phases_come_back_in_the_server_timing_header() -> None:
    app = Starlette(routes=[Route("/timed", timed), Route("/untimed", untimed)])
    app.add_middleware(ServerTimingMiddleware)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        answer = await client.get("/timed")
        phases = parse(answer.headers["server-timing"])
        assert list(phases) == ["reads", "insert"]
        assert phases["reads"] >= 20.0
        assert "server-timing" not in (await client.get("/untimed")).headers


def test_a_header_parses_to_milliseconds_by_name() -> None:
    assert parse('db;dur=53.2, cache;desc="Cache Read";dur=2, total') == {"db": 53.2, "cache": 2.0}
    assert parse("") == {}
