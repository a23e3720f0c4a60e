"""Forwarding of public API calls to the service that owns them, with a signed identity."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from urllib.parse import quote

from fastapi import Request, Response
from fastapi.responses import StreamingResponse
from opentelemetry.propagate import inject
from yarl import URL

from gpucloud_libs.errors import DependencyUnavailable, ValidationFailed
from gpucloud_libs.identity import IDENTITY_HEADER, IdentitySigner

from .routes import ForwardedRoute, Reference, ServiceName
from .schemas import Principal
from .settings import GatewaySettings
from .upstream import Headers, Upstream, UpstreamUnreachable, forwardable

#: Credentials meant for the gateway never travel further; nor does a caller's own
#: attempt at an identity header.
GATEWAY_ONLY_HEADERS = frozenset({"authorization", "cookie", IDENTITY_HEADER.lower()})


def identity_headers(
    signer: IdentitySigner,
    principal: Principal,
    *,
    service: ServiceName,
    method: str,
    path: str,
    query: str = "",
    body: bytes = b"",
) -> Headers:
    """The caller's identity for one request to `service` (`path` and `query` as sent,
    the query without its `?`, and these body bytes), and the trace context."""
    token = signer.sign(
        subject=principal.subject,
        role=principal.role,
        tenant_id=principal.tenant_id,
        audience=service,
        method=method,
        path=path,
        query=query,
        body=body,
    )
    carrier: dict[str, str] = {}
    inject(carrier)  # the caller's trace continues in the service
    return [(IDENTITY_HEADER, token), *carrier.items()]


def exact_url(base_and_path: str, query: str) -> URL:
    """The URL sent byte for byte as written, never requoted: the service must see the
    very path and query the identity was signed for."""
    return URL(base_and_path + (f"?{query}" if query else ""), encoded=True)


def relay(status: int, headers: Headers, body: bytes) -> Response:
    """An upstream's answer as the gateway's, keeping repeated headers as they were."""
    response = Response(body, status_code=status)
    response.raw_headers.extend((name.lower().encode(), value.encode()) for name, value in headers)
    return response


class Forwarder:
    def __init__(
        self, settings: GatewaySettings, upstream: Upstream, signer: IdentitySigner
    ) -> None:
        self.settings = settings
        self.upstream = upstream
        self.signer = signer
        self.base_urls: dict[ServiceName, str] = {
            "instances": settings.instances_url,
            "storage": settings.storage_url,
            "metering": settings.metering_url,
            "monitoring": settings.monitoring_url,
        }

    async def forward(
        self, request: Request, principal: Principal, route: ForwardedRoute
    ) -> Response:
        body = await self._read_body(request)
        for reference in route.references:
            await self._check_reference(principal, reference, body)
        # The path as it came, still encoded: the service decodes it once, as the
        # gateway did to match the route, so `%252F` can never become a `/` there.
        path = request.scope["raw_path"].decode("latin-1").removeprefix("/v1")
        query = request.scope["query_string"].decode("latin-1")
        headers = forwardable(request.headers.items(), drop=GATEWAY_ONLY_HEADERS)
        headers += identity_headers(
            self.signer, principal, service=route.service, method=request.method,
            path=path, query=query, body=b"" if route.streams else body,  # a stream sends none
        )  # fmt: skip
        url = exact_url(f"{self.base_urls[route.service]}{path}", query)
        try:
            if route.streams:
                return await self._stream(request.method, url, headers)
            response = await self.upstream.call(request.method, url, headers=headers, body=body)
        except UpstreamUnreachable as error:
            raise DependencyUnavailable(
                f"the {route.service} service did not answer; try again shortly",
                retry_after_s=2,
                service=route.service,
            ) from error
        return relay(response.status, response.headers, response.body)

    async def _check_reference(
        self, principal: Principal, reference: Reference, body: bytes
    ) -> None:
        """A 422 naming the field when the resource it names does not exist; anything
        else (no such field, a body that is not JSON) is left to the service to judge."""
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            return
        value = parsed.get(reference.field) if isinstance(parsed, dict) else None
        if not isinstance(value, str) or not value:
            return
        path = reference.path.format(quote(value, safe=""))
        headers = identity_headers(
            self.signer, principal, service=reference.service, method="GET", path=path
        )
        url = exact_url(f"{self.base_urls[reference.service]}{path}", "")
        try:
            found = await self.upstream.call("GET", url, headers=headers, body=b"")
        except UpstreamUnreachable as error:
            raise DependencyUnavailable(
                f"the {reference.service} service did not answer; try again shortly",
                retry_after_s=2, service=reference.service,
            ) from error  # fmt: skip
        if found.status == 404:
            message = f"no {reference.noun} named {value!r}"
            raise ValidationFailed(
                message, errors=[{"loc": ["body", reference.field], "msg": message,
                                  "type": "unknown_reference"}],
            )  # fmt: skip

    async def _stream(self, method: str, url: URL, headers: Headers) -> Response:
        """The answer passed on as it comes (a followed log), not read whole first."""
        stack = contextlib.AsyncExitStack()
        upstream = await stack.enter_async_context(
            self.upstream.stream(method, url, headers=headers, body=None)
        )

        async def chunks() -> AsyncIterator[bytes]:
            async with stack:
                async for chunk in upstream.chunks:
                    yield chunk

        response = StreamingResponse(chunks(), status_code=upstream.status)
        response.raw_headers.extend(
            (name.lower().encode(), value.encode()) for name, value in upstream.headers
        )
        return response

    async def _read_body(self, request: Request) -> bytes:
        # Bounded by the app's BodyLimitMiddleware (libs http), like every app's.
        return await request.body()
