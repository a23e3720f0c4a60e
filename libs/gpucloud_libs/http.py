"""HTTP error rendering: every error leaves a service as application/problem+json."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from http import HTTPStatus
from typing import Annotated, Any, TypeVar, cast

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import APIKeyHeader
from pydantic import BaseModel, ConfigDict, field_validator
from pydantic.alias_generators import to_camel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect, HTTPConnection
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import (
    PROBLEM_JSON,
    PROBLEM_TYPE_BASE,
    GpucloudError,
    PayloadTooLarge,
    Unauthenticated,
    ValidationFailed,
)
from .identity import GATEWAY, IDENTITY_HEADER, Identity, IdentityVerifier

log = logging.getLogger(__name__)

PartT = TypeVar("PartT")


def app_part(kind: type[PartT]) -> Any:
    """A route dependency on the app's part of type `kind`, as given to
    `ServiceRuntime.create_app(parts=...)`. Routes name what they use:
    `Specs = Annotated[SpecCatalog, app_part(SpecCatalog)]`."""

    def get(connection: HTTPConnection) -> PartT:
        return cast(PartT, connection.app.state.parts[kind])

    return Depends(get)


def encode_cursor(key: str) -> str:
    """An opaque page cursor: the last key seen, hex-encoded (URL-safe as it is)."""
    return key.encode().hex()


def decode_cursor(cursor: str) -> str:
    try:
        return bytes.fromhex(cursor).decode()
    except ValueError as error:  # also a UnicodeDecodeError
        raise ValidationFailed("invalid cursor") from error


def _holds_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, list | tuple):
        return any(_holds_nul(item) for item in value)
    if isinstance(value, dict):
        return any(_holds_nul(key) or _holds_nul(item) for key, item in value.items())
    return False


class ApiModel(BaseModel):
    """Base of public request and response bodies: camelCase on the wire (seed 004's
    style), snake_case in Python, and unknown request fields refused rather than
    silently dropped.

    NUL characters are refused in every string: they mean nothing in names or
    values, and PostgreSQL (under the MongoDB-wire store) cannot hold them.
    """

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    @field_validator("*", mode="after")
    @classmethod
    def _no_nul(cls, value: Any) -> Any:
        if _holds_nul(value):
            raise ValueError("NUL characters are not allowed")
        return value


class RejectNulMiddleware:
    """400 for a path or query string holding an encoded NUL (%00), before any route
    or store sees it: no identifier or filter value may contain one."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in {"http", "websocket"}:
            raw = (scope.get("raw_path") or b"") + b"?" + scope.get("query_string", b"")
            if b"%00" in raw or b"\x00" in raw:
                response = _http_problem(
                    400, "NUL characters are not allowed in URLs", HTTPConnection(scope)
                )
                if scope["type"] == "http":
                    await response(scope, receive, send)
                else:
                    await send({"type": "websocket.close", "code": 1008})
                return
        await self.app(scope, receive, send)


class CarriedError(StarletteHTTPException):
    """One of our errors, raised where the framework lets only an HTTPException through:
    FastAPI turns anything else raised while it reads a body into a 400."""

    def __init__(self, error: GpucloudError) -> None:
        super().__init__(error.status, error.detail)
        self.error = error


class BodyLimitMiddleware:
    """413 for a request body over `max_bytes`, before it is read: at once when its
    Content-Length says so, and as soon as a streamed (chunked) body passes it.

    Every app has it, so no route, however it reads its body, holds more than the
    limit in memory. Routes that are not JSON API calls (the gateway's instance
    URLs) are served by middleware outside this one.
    """

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    def _too_large(self) -> PayloadTooLarge:
        return PayloadTooLarge(
            f"request bodies are limited to {self.max_bytes} bytes; upload data to a "
            "storage with a presigned URL instead",
            max_bytes=self.max_bytes,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_bytes:
            await problem_response(self._too_large(), HTTPConnection(scope))(scope, receive, send)
            return
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise CarriedError(self._too_large())  # a 413 problem, from the app
            return message

        await self.app(scope, counted, send)


#: Set in the ASGI scope when the service itself refused a credential (a 401 of its own,
#: not one a proxied workload answered): what the gateway's per-address limit counts.
REFUSED_CREDENTIAL = "gpucloud.refused_credential"


def problem_response(error: GpucloudError, request: HTTPConnection) -> JSONResponse:
    """`error` as problem+json; `request` may be a WebSocket refused at the handshake."""
    if error.status == 401:
        request.scope[REFUSED_CREDENTIAL] = True
    headers = (
        {"Retry-After": str(error.extensions["retry_after_s"])}
        if "retry_after_s" in error.extensions
        else None
    )
    return JSONResponse(
        error.problem(instance=request.url.path),
        status_code=error.status,
        media_type=PROBLEM_JSON,
        headers=headers,
    )


def _http_problem(status: int, detail: str, request: HTTPConnection) -> JSONResponse:
    phrase = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else "Error"
    code = phrase.lower().replace(" ", "_").replace("-", "_")
    body = {
        "type": PROBLEM_TYPE_BASE + code,
        "title": phrase,
        "status": status,
        "detail": detail,
        "code": code,
        "instance": request.url.path,
    }
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON)


def field_errors(
    errors: Sequence[Mapping[str, Any]], *, under: tuple[str, ...] = ()
) -> list[dict[str, Any]]:
    """Pydantic's errors as a 422 lists them: where (`under` first), what, which rule."""
    return [
        {
            "loc": [*under, *item.get("loc", ())],
            "msg": item.get("msg", ""),
            "type": item.get("type", ""),
        }
        for item in errors
    ]


#: The status recorded for a request whose caller hung up (nginx's 499).
CLIENT_CLOSED_REQUEST = 499


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(GpucloudError)
    async def on_gpucloud_error(request: Request, error: GpucloudError) -> JSONResponse:
        return problem_response(error, request)

    @app.exception_handler(RequestValidationError)
    async def on_validation_error(request: Request, error: RequestValidationError) -> JSONResponse:
        problem = ValidationFailed(
            "the request does not match the schema", errors=field_errors(error.errors())
        )
        return problem_response(problem, request)

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
        if isinstance(error, CarriedError):
            return problem_response(error.error, request)
        return _http_problem(error.status_code, str(error.detail), request)

    @app.exception_handler(ClientDisconnect)
    async def on_client_gone(request: Request, _: ClientDisconnect) -> Response:
        # The caller hung up while its body was read (a closed tab, a cancelled
        # command): nothing went wrong here, and no answer reaches anyone.
        log.info("client disconnected", extra={"path": request.url.path})
        return Response(status_code=CLIENT_CLOSED_REQUEST)

    @app.exception_handler(Exception)
    async def on_unexpected(request: Request, error: Exception) -> JSONResponse:
        log.exception("unhandled error", extra={"path": request.url.path})
        return _http_problem(500, "an unexpected error occurred; it has been logged", request)


_identity_header = APIKeyHeader(
    name=IDENTITY_HEADER,
    auto_error=False,
    description="Signed caller identity, added by the gateway to every forwarded request.",
)


def identity_from(*issuers: str) -> Callable[..., Awaitable[Identity]]:
    """A route's caller: an identity signed for this very request by one of `issuers`.
    Routes take the gateway's alone (`CurrentIdentity`); the few that another service
    calls name it too, so a service's key signs for no route it does not call (M1)."""

    async def verified(
        request: Request, token: Annotated[str | None, Depends(_identity_header)]
    ) -> Identity:
        verifier: IdentityVerifier = request.app.state.identity_verifier
        # The path as sent, still encoded: what the signer signed.
        path = (request.scope.get("raw_path") or request.url.path.encode()).decode("latin-1")
        query = request.scope.get("query_string", b"").decode("latin-1")
        # Bounded by BodyLimitMiddleware; FastAPI parses the same, cached, bytes.
        body = await request.body()
        identity = verifier.verify(token, method=request.method, path=path, query=query, body=body)
        if identity.issuer not in issuers:
            raise Unauthenticated(
                f"this route takes identities signed by {' or '.join(issuers)}, "
                f"not by {identity.issuer}"
            )
        return identity

    return verified


CurrentIdentity = Annotated[Identity, Depends(identity_from(GATEWAY))]
