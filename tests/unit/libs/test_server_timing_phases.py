"""Server-Timing details (gpucloud_libs.server_timing) beyond the basic header:
phases are listed in the order they end, a phase that fails is still timed, each
duration has one decimal, a phase outside a request costs nothing, and the parser
reads only what carries a duration."""

from __future__ import annotations

import re

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from gpucloud_libs.server_timing import ServerTimingMiddleware, parse, phase


async def nested(_: Request) -> PlainTextResponse:
    with phase("outer"):
        with phase("inner"):
            pass
        with phase("second-inner"):
            pass
    return PlainTextResponse("ok")


async def failing_phase(_: Request) -> PlainTextResponse:
    try:
        with phase("lookup"):
            raise KeyError("absent")
    except KeyError:
        return PlainTextResponse("not found", status_code=404)


async def answer(path: str) -> httpx.Response:
    app = Starlette(routes=[Route("/nested", nested), Route("/failing", failing_phase)])
    app.add_middleware(ServerTimingMiddleware)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        return await client.get(path)


async def test_phases_are_listed_in_the_order_they_end() -> None:
    header = (await answer("/nested")).headers["server-timing"]
    assert list(parse(header)) == ["inner", "second-inner", "outer"]


async def test_a_phase_that_raises_is_still_timed() -> None:
    response = await answer("/failing")
    assert response.status_code == 404
    assert list(parse(response.headers["server-timing"])) == ["lookup"]


async def test_each_duration_is_written_in_milliseconds_with_one_decimal() -> None:
    header = (await answer("/nested")).headers["server-timing"]
    assert re.fullmatch(r"inner;dur=\d+\.\d, second-inner;dur=\d+\.\d, outer;dur=\d+\.\d", header)


def test_a_phase_outside_a_request_runs_its_block_and_records_nothing() -> None:
    ran = []
    with phase("startup"):
        ran.append(1)
    assert ran == [1]


async def test_phases_of_one_request_do_not_leak_into_the_next() -> None:
    first = parse((await answer("/nested")).headers["server-timing"])
    second = parse((await answer("/failing")).headers["server-timing"])
    assert (len(first), list(second)) == (3, ["lookup"])


def test_the_parser_reads_each_metrics_duration_and_skips_the_rest() -> None:
    header = ' db ; desc="Mongo primary" ; dur=53.25 ,, cache;desc=hit, app;dur=0 , total;dur=7'
    assert parse(header) == {"db": 53.25, "app": 0.0, "total": 7.0}


def test_a_metric_named_twice_keeps_its_last_duration() -> None:
    assert parse("db;dur=1, db;dur=2") == {"db": 2.0}


def test_a_comma_inside_a_quoted_description_does_not_split_a_metric() -> None:
    assert parse('db;desc="Mongo, primary";dur=53.25, app;dur=1.5') == {"db": 53.25, "app": 1.5}
