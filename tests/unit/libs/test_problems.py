"""How every error leaves a service (gpucloud_libs.errors, gpucloud_libs.http): as
RFC 9457 problem+json with a stable code, a Retry-After where one is due, and the
same shape for the framework's own errors; request bodies over the limit and URLs
holding a NUL are refused before any route sees them; page cursors are opaque and
a forged one is a validation error."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from pydantic import Field, ValidationError
from starlette.requests import HTTPConnection
from starlette.types import Message

from gpucloud_libs.errors import (
    PROBLEM_JSON,
    BadRequest,
    Conflict,
    DependencyUnavailable,
    Forbidden,
    GpucloudError,
    NotFound,
    PayloadTooLarge,
    QuotaExceeded,
    RateLimited,
    TenantNotReady,
    Unauthenticated,
    ValidationFailed,
)
from gpucloud_libs.http import (
    REFUSED_CREDENTIAL,
    ApiModel,
    BodyLimitMiddleware,
    RejectNulMiddleware,
    decode_cursor,
    encode_cursor,
    install_error_handlers,
    problem_response,
)

# --- the errors ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "status", "code"),
    [
        (GpucloudError, 500, "internal"),
        (BadRequest, 400, "bad_request"),
        (Unauthenticated, 401, "unauthenticated"),
        (Forbidden, 403, "forbidden"),
        (NotFound, 404, "not_found"),
        (Conflict, 409, "conflict"),
        (TenantNotReady, 409, "tenant_not_ready"),
        (PayloadTooLarge, 413, "payload_too_large"),
        (ValidationFailed, 422, "validation_failed"),
        (QuotaExceeded, 422, "quota_exceeded"),
        (RateLimited, 429, "rate_limited"),
        (DependencyUnavailable, 503, "dependency_unavailable"),
    ],
)
def test_each_error_has_its_status_and_the_code_clients_switch_on(
    error: type[GpucloudError], status: int, code: str
) -> None:
    problem = error("what happened").problem()
    assert (problem["status"], problem["code"]) == (status, code)
    assert problem["type"] == f"https://gpucloud.dev/problems/{code}"
    assert problem["detail"] == "what happened"
    assert problem["title"] == error.title
    assert "instance" not in problem


def test_a_tenant_not_ready_is_a_conflict_to_whoever_catches_conflicts() -> None:
    assert issubclass(TenantNotReady, Conflict)


def test_a_problem_carries_the_request_path_and_the_errors_extensions() -> None:
    problem = QuotaExceeded("8 GPUs of 8 in use", requested=2, limit=8).problem("/gpu-instances")
    assert problem["instance"] == "/gpu-instances"
    assert (problem["requested"], problem["limit"]) == (2, 8)
    assert str(QuotaExceeded("8 GPUs of 8 in use")) == "8 GPUs of 8 in use"


# --- problem responses -----------------------------------------------------------


def connection(path: str = "/v1/things") -> HTTPConnection:
    scope: dict[str, Any] = {
        "type": "http", "method": "GET", "path": path, "raw_path": path.encode(),
        "query_string": b"", "headers": [], "scheme": "http", "server": ("test", 80),
    }  # fmt: skip
    return HTTPConnection(scope)


def test_a_problem_response_is_problem_json_with_the_errors_status() -> None:
    response = problem_response(NotFound("no instance 'nb-1'"), connection("/v1/i/nb-1"))
    assert response.status_code == 404
    assert response.media_type == PROBLEM_JSON
    body = json.loads(bytes(response.body))
    assert (body["code"], body["instance"], body["detail"]) == (
        "not_found",
        "/v1/i/nb-1",
        "no instance 'nb-1'",
    )


def test_an_error_that_says_when_to_retry_sends_retry_after_in_seconds() -> None:
    response = problem_response(RateLimited("slow down", retry_after_s=7), connection())
    assert response.headers["retry-after"] == "7"
    assert "retry-after" not in problem_response(RateLimited("slow down"), connection()).headers


def test_only_a_refused_credential_is_marked_on_the_request() -> None:
    refused, forbidden = connection(), connection()
    problem_response(Unauthenticated("expired"), refused)
    problem_response(Forbidden("not yours"), forbidden)
    assert refused.scope.get(REFUSED_CREDENTIAL) is True
    assert REFUSED_CREDENTIAL not in forbidden.scope


# --- the app's error handling, body limit and NUL guard --------------------------


class Body(ApiModel):
    instance_name: str
    tags: list[str] = Field(default_factory=list)


def app(max_bytes: int = 1024) -> FastAPI:
    made = FastAPI()
    install_error_handlers(made)
    made.add_middleware(BodyLimitMiddleware, max_bytes=max_bytes)
    made.add_middleware(RejectNulMiddleware)

    @made.post("/echo")
    async def echo(body: Body) -> dict[str, Any]:
        return body.model_dump(by_alias=True)

    @made.post("/size")
    async def size(request: Request) -> dict[str, int]:
        return {"bytes": len(await request.body())}

    @made.get("/conflict")
    async def conflict() -> None:
        raise Conflict("the name is taken", existing="nb-1")

    @made.get("/crash")
    async def crash() -> None:
        raise RuntimeError("the database password is hunter2")

    return made


def client(served: FastAPI) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=served, raise_app_exceptions=False)
    return httpx.AsyncClient(transport=transport, base_url="http://test")


async def test_a_raised_error_reaches_the_client_as_its_problem() -> None:
    async with client(app()) as http:
        answer = await http.get("/conflict")
    assert answer.status_code == 409
    assert answer.headers["content-type"] == PROBLEM_JSON
    assert answer.json() == {
        "type": "https://gpucloud.dev/problems/conflict", "title": "Conflict", "status": 409,
        "detail": "the name is taken", "code": "conflict", "instance": "/conflict",
        "existing": "nb-1",
    }  # fmt: skip


async def test_an_unexpected_error_is_a_500_problem_that_leaks_nothing() -> None:
    async with client(app()) as http:
        answer = await http.get("/crash")
    assert answer.status_code == 500
    assert answer.json()["code"] == "internal_server_error"
    assert "hunter2" not in answer.text


async def test_a_caller_that_hangs_up_mid_body_is_no_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A closed tab or a cancelled command leaves its request unread: that is logged
    as the caller's leaving (499), not as an unexpected error of the service."""
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": "/size", "raw_path": b"/size", "query_string": b"",
        "headers": [(b"content-length", b"10")], "client": ("127.0.0.1", 1),
        "server": ("test", 80),
    }  # fmt: skip
    with caplog.at_level("INFO", logger="gpucloud_libs.http"):
        await app()(scope, receive, send)
    assert sent[0]["status"] == 499
    assert [r.getMessage() for r in caplog.records] == ["client disconnected"]


@pytest.mark.parametrize(
    ("method", "path", "status", "code"),
    [("GET", "/nowhere", 404, "not_found"), ("PUT", "/echo", 405, "method_not_allowed")],
)
async def test_the_frameworks_own_errors_are_problems_too(
    method: str, path: str, status: int, code: str
) -> None:
    async with client(app()) as http:
        answer = await http.request(method, path)
    assert answer.status_code == status
    assert answer.headers["content-type"] == PROBLEM_JSON
    assert (answer.json()["code"], answer.json()["instance"]) == (code, path)


async def test_a_body_that_does_not_match_the_schema_lists_where_it_does_not() -> None:
    async with client(app()) as http:
        answer = await http.post("/echo", json={"instanceName": 5, "extra": True})
    assert answer.status_code == 422
    problem = answer.json()
    assert problem["code"] == "validation_failed"
    assert sorted(tuple(e["loc"]) for e in problem["errors"]) == [
        ("body", "extra"),
        ("body", "instanceName"),
    ]


async def test_bodies_are_camel_case_on_the_wire() -> None:
    async with client(app()) as http:
        answer = await http.post("/echo", json={"instanceName": "nb-1", "tags": ["a"]})
    assert answer.json() == {"instanceName": "nb-1", "tags": ["a"]}


async def test_a_body_over_the_limit_is_refused_and_one_at_it_is_served() -> None:
    async with client(app(max_bytes=10)) as http:
        at_limit = await http.post("/size", content=b"x" * 10)
        over = await http.post("/size", content=b"x" * 11)
    assert (at_limit.status_code, at_limit.json()) == (200, {"bytes": 10})
    assert over.status_code == 413
    assert (over.json()["code"], over.json()["max_bytes"]) == ("payload_too_large", 10)


async def test_a_streamed_body_is_refused_once_it_passes_the_limit() -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(5):
            yield b"xxx"

    async with client(app(max_bytes=10)) as http:
        answer = await http.post("/size", content=chunks())
    assert answer.status_code == 413
    assert answer.json()["code"] == "payload_too_large"


@pytest.mark.parametrize("url", ["/echo%00", "/size?name=a%00b", "/nowhere%00"])
async def test_a_url_holding_a_nul_is_refused_before_any_route(url: str) -> None:
    async with client(app()) as http:
        answer = await http.post(url, content=b"{}")
    assert answer.status_code == 400
    assert answer.json()["detail"] == "NUL characters are not allowed in URLs"


# --- bodies ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        {"instanceName": "nb\x00-1"},
        {"instanceName": "nb-1", "tags": ["ok", "bad\x00"]},
    ],
)
def test_a_nul_anywhere_in_a_body_is_refused(body: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match="NUL characters are not allowed"):
        Body.model_validate(body)


def test_a_body_is_read_by_its_camel_case_or_python_names_and_nothing_else() -> None:
    assert Body.model_validate({"instanceName": "a"}).instance_name == "a"
    assert Body.model_validate({"instance_name": "a"}).instance_name == "a"
    with pytest.raises(ValidationError, match="extra"):
        Body.model_validate({"instanceName": "a", "colour": "red"})


# --- page cursors ----------------------------------------------------------------


@pytest.mark.parametrize("key", ["nb-1", "", "t-1/nb-1#3", "ünïcödé", "a" * 300])
def test_a_cursor_reads_back_as_the_key_it_was_made_from(key: str) -> None:
    cursor = encode_cursor(key)
    assert decode_cursor(cursor) == key
    assert all(ch in "0123456789abcdef" for ch in cursor)  # safe in a URL as it is


@pytest.mark.parametrize("cursor", ["xyz", "abc", "ff", "c3"])
def test_a_forged_or_cut_cursor_is_a_validation_error(cursor: str) -> None:
    """Not hex, an odd number of digits, or bytes that are no UTF-8."""
    with pytest.raises(ValidationFailed, match="invalid cursor"):
        decode_cursor(cursor)
