"""HTTP error rendering: every error leaves a service as application/problem+json."""

from __future__ import annotations

import logging
from http import HTTPStatus
from typing import Annotated

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import APIKeyHeader
from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import HTTPConnection

from .errors import PROBLEM_JSON, PROBLEM_TYPE_BASE, GpucloudError, ValidationFailed
from .identity import IDENTITY_HEADER, Identity, verify_identity

log = logging.getLogger(__name__)


class ApiModel(BaseModel):
    """Base of public request and response bodies: camelCase on the wire (seed 004's
    style), snake_case in Python, and unknown request fields refused rather than
    silently dropped."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


def problem_response(error: GpucloudError, request: HTTPConnection) -> JSONResponse:
    """`error` as problem+json; `request` may be a WebSocket refused at the handshake."""
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


def _http_problem(status: int, detail: str, request: Request) -> JSONResponse:
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


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(GpucloudError)
    async def on_gpucloud_error(request: Request, error: GpucloudError) -> JSONResponse:
        return problem_response(error, request)

    @app.exception_handler(RequestValidationError)
    async def on_validation_error(request: Request, error: RequestValidationError) -> JSONResponse:
        errors = [
            {
                "loc": list(item.get("loc", ())),
                "msg": item.get("msg", ""),
                "type": item.get("type", ""),
            }
            for item in error.errors()
        ]
        problem = ValidationFailed("the request does not match the schema", errors=errors)
        return problem_response(problem, request)

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
        return _http_problem(error.status_code, str(error.detail), request)

    @app.exception_handler(Exception)
    async def on_unexpected(request: Request, error: Exception) -> JSONResponse:
        log.exception("unhandled error", extra={"path": request.url.path})
        return _http_problem(500, "an unexpected error occurred; it has been logged", request)


_identity_header = APIKeyHeader(
    name=IDENTITY_HEADER,
    auto_error=False,
    description="Signed caller identity, added by the gateway to every forwarded request.",
)


async def current_identity(
    request: Request, token: Annotated[str | None, Depends(_identity_header)]
) -> Identity:
    key: str = request.app.state.identity_signing_key
    return verify_identity(key, token)


CurrentIdentity = Annotated[Identity, Depends(current_identity)]
