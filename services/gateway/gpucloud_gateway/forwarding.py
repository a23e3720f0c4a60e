"""Forwarding of public API calls to the service that owns them, with a signed identity."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator
from urllib.parse import quote

from fastapi import Request, Response
from fastapi.responses import StreamingResponse
from opentelemetry.propagate import inject
from yarl import URL

from gpucloud_libs.errors import DependencyUnavailable, GpucloudError, ValidationFailed
from gpucloud_libs.identity import IDENTITY_HEADER, IdentitySigner

from .routes import ForwardedRoute, Reference, ServiceName
from .schemas import Principal
from .settings import GatewaySettings
from .upstream import Headers, Upstream, UpstreamUnreachable, forwardable


class ReferenceUncheckable(GpucloudError):
    """The owning service refused the gateway's own read: its keys or rights are wrong."""

    status = 502
    code = "reference_uncheckable"
    title = "Reference could not be checked"


#: The owner's answers that say no such resource exists: not found, or a name that
#: could not name one (a NUL in it, say).
NO_SUCH_RESOURCE = frozenset({400, 404, 422})
#: Longer than any name a service gives a resource: left to the service's own 422.
MAX_REFERENCE_LENGTH = 253
log = logging.getLogger(__name__)

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
        project=principal.project,
        projects=principal.projects,
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
        self,
        settings: GatewaySettings,
        upstream: Upstream,
        signer: IdentitySigner,
        *,
        streams: Upstream | None = None,
    ) -> None:
        self.settings = settings
        self.upstream = upstream
        #: Where the API's streams go (logs): a pool of their own, when given.
        self.streams = streams or upstream
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
        """A 422 naming the field when the resource it names does not exist; a 503 when
        the owner cannot say. A body that is not JSON, or names nothing, is left to the
        service to judge."""
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            return
        if not isinstance(parsed, dict):
            return
        for field in reference.fields:
            value = parsed.get(field)
            if isinstance(value, str) and 0 < len(value) <= MAX_REFERENCE_LENGTH:
                await self._must_exist(principal, reference, field, value)

    async def _must_exist(
        self, principal: Principal, reference: Reference, field: str, value: str
    ) -> None:
        path = reference.path.format(quote(value, safe=""))
        headers = identity_headers(
            self.signer, principal, service=reference.service, method="GET", path=path
        )
        url = exact_url(f"{self.base_urls[reference.service]}{path}", "")
        unavailable = DependencyUnavailable(
            f"the {reference.service} service could not say whether {reference.noun} "
            f"{value!r} exists; try again shortly",
            retry_after_s=2, service=reference.service,
        )  # fmt: skip
        try:
            found = await self.upstream.call("GET", url, headers=headers, body=b"")
        except UpstreamUnreachable as error:
            raise unavailable from error
        if found.status in NO_SUCH_RESOURCE:
            message = f"no {reference.noun} named {value!r}"
            raise ValidationFailed(
                message, errors=[{"loc": ["body", field], "msg": message,
                                  "type": "unknown_reference"}],
            )  # fmt: skip
        if found.status >= 500:
            raise unavailable
        if not 200 <= found.status < 300:
            # The gateway's own signed read refused: a deployment fault, not the caller's.
            log.error(
                "a reference check was refused",
                extra={"service": reference.service, "path": path, "status": found.status},
            )
            raise ReferenceUncheckable(
                f"the {reference.noun} named in {field} could not be checked; "
                "the operator has been told"
            )

    async def _stream(self, method: str, url: URL, headers: Headers) -> Response:
        """The answer passed on as it comes (a followed log), not read whole first."""
        stack = contextlib.AsyncExitStack()
        upstream = await stack.enter_async_context(
            self.streams.stream(method, url, headers=headers, body=None)
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
