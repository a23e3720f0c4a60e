"""Instance and inference-service URLs: the reverse proxy to the public ports of
running instances, and to the serving replicas of inference services.

Every `<instance>--<port>--<tenant>.<instance_domain>` host, and every
`<service>--<tenant>.<instance_domain>` host, reaches the gateway (a wildcard DNS
record). The gateway authenticates the caller by an `Authorization` header or by
the session cookie, lets only members of the owning tenant through, asks the
instances service where the port (or the service's replicas) are, and proxies
HTTP (streamed both ways) and WebSocket. A service's requests go to its least
busy replica (balancer.py); one that cannot connect is tried on another.

Where a host leads is instance_targets.py's; a browser's cookie comes from a session
link (instance_links.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

from fastapi import Request
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket

from gpucloud_libs.errors import DependencyUnavailable, GpucloudError, NotFound, Unauthenticated
from gpucloud_libs.http import problem_response
from gpucloud_libs.naming import public_origin

from .address_guard import client_address
from .authentication import Authenticator
from .authorization import Authorizer
from .balancer import ReplicaBalancer
from .credentials import API_AUDIENCE
from .instance_cookies import (
    is_cross_site,
    require_same_site_for_changes,
    session_cookie_name,
    workload_cookies,
)
from .instance_links import SESSION_PATH, SessionLinks
from .instance_relay import WS_HANDSHAKE, deny_handshake, pump, upstream_headers
from .instance_targets import InstanceTargets, InstanceUnreachable, RelayedProblem, no_longer_served
from .long_connections import LongConnections
from .schemas import Principal
from .service_load import ServiceLoad
from .settings import GatewaySettings
from .upstream import (
    StreamedResponse,
    Upstream,
    UpstreamRefused,
    UpstreamUnreachable,
)


class NoServingReplica(DependencyUnavailable):
    code = "no_serving_replica"
    title = "No replica of the service is serving"


class InstanceProxy:
    def __init__(
        self,
        settings: GatewaySettings,
        authenticator: Authenticator,
        authorizer: Authorizer,
        upstream: Upstream,
        targets: InstanceTargets,
        links: SessionLinks,
        load: ServiceLoad,
        connections: LongConnections,
    ) -> None:
        self.settings = settings
        self.authenticator = authenticator
        self.authorizer = authorizer
        self.upstream = upstream
        self.targets = targets
        self.links = links
        self.load = load
        self.connections = connections
        self._domain_suffix = "." + settings.instance_domain
        self.cookie_name = session_cookie_name(settings)
        self.balancer = ReplicaBalancer(cooldown_s=settings.replica_cooldown_s)

    def serves(self, host: str) -> bool:
        return host.endswith(self._domain_suffix)

    # --- who ---------------------------------------------------------------------------

    def _origin(self, host: str) -> str:
        """The origin of an instance host's own pages, as its URLs are written."""
        return public_origin(
            self.settings.instance_url_scheme, host, self.settings.instance_url_port
        )

    async def _caller(
        self, headers: dict[str, str], cookies: dict[str, str], host: str
    ) -> tuple[Principal, bool]:
        """The principal, and whether it came from the cookie (not a header)."""
        authorization = headers.get("authorization", "")
        scheme, _, credential = authorization.partition(" ")
        if scheme.lower() == "bearer" and credential.startswith(("gpc_", "gpt_")):
            return await self.authenticator.authenticate(credential, audience=API_AUDIENCE), False
        cookie = cookies.get(self.cookie_name)
        if cookie:
            return await self.authenticator.authenticate_token(cookie, audience=host), True
        raise Unauthenticated(
            "open this instance through its session link, or send `Authorization: Bearer <key>`"
        )

    async def _proxy_service(
        self,
        request: Request,
        principal: Principal,
        host: str,
        service_id: str,
        asgi: tuple[Scope, Receive, Send],
    ) -> None:
        """To the least busy serving replica; a replica that fails before answering is
        left for another when the request may be sent again (`_proxy_http`), and while
        none serves the request waits up to `service_wait_s`, re-reading the replicas."""
        with self.load.track(principal.tenant_id or "", service_id):
            deadline = asyncio.get_running_loop().time() + self.settings.service_wait_s
            tried: set[str] = set()
            pause = 0.05
            addresses, port = await self.targets.serving_replicas(principal, service_id)
            if not addresses:
                self.load.report_soon()  # scaled to zero, or starting: the autoscaler must know
            while True:
                address = self.balancer.pick(addresses, tried=tried)
                if address is None:
                    if asyncio.get_running_loop().time() >= deadline:
                        raise NoServingReplica(
                            f"no replica of service {service_id!r} is serving; it may be "
                            "starting or scaling up",
                            retry_after_s=2,
                        )
                    await asyncio.sleep(pause)
                    pause = min(pause * 2, 0.5)
                    addresses, port = await self.targets.serving_replicas(
                        principal, service_id, fresh=True
                    )
                    tried.clear()
                    continue
                try:
                    with self.balancer.track(address):
                        await self._proxy_http(request, host, address, port, *asgi, retryable=True)
                    return
                except UpstreamUnreachable:
                    self.balancer.refused(address)
                    tried.add(address)

    # --- HTTP ----------------------------------------------------------------------

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        host = _host(request.headers.get("host", ""))
        try:
            if request.url.path == SESSION_PATH:
                await (await self.links.start(request, host))(scope, receive, send)
                return
            principal, via_cookie = await self._caller(
                dict(request.headers), dict(request.cookies), host
            )
            if via_cookie:
                require_same_site_for_changes(request.method, request.headers, self._origin(host))
            await self.authorizer.check_writable(principal, request.method)
            service_id = self.targets.service_of(principal, host)
            if service_id is not None:
                await self._proxy_service(
                    request, principal, host, service_id, (scope, receive, send)
                )
                return
            _, port, address = await self.targets.instance(principal, host)
            await self._proxy_http(request, host, address, port, scope, receive, send)
        except GpucloudError as error:
            await problem_response(error, request)(scope, receive, send)
        except RelayedProblem as problem:
            await problem.response(scope, receive, send)

    async def _proxy_http(
        self,
        request: Request,
        host: str,
        address: str,
        port: int,
        scope: Scope,
        receive: Receive,
        send: Send,
        *,
        retryable: bool = False,
    ) -> None:
        """`retryable`: a request that failed before any answer and may be sent again
        raises UpstreamUnreachable for the caller to try elsewhere, instead of 502."""
        url = f"http://{address}:{port}{request.url.path}"
        if request.url.query:
            url += f"?{request.url.query}"
        client = client_address(request, self.settings.trusted_proxies)
        headers = upstream_headers(
            request.headers.items(), host, client,
            cookie_name=self.cookie_name, scheme=self.settings.instance_url_scheme,
        )  # fmt: skip
        has_body = (
            request.headers.get("content-length", "0") != "0"
            or "transfer-encoding" in request.headers
        )
        body: AsyncIterator[bytes] | None = request.stream() if has_body else None
        try:
            async with self.upstream.stream(
                request.method, url, headers=headers, body=body
            ) as answer:
                response = StreamedResponse(
                    answer.status, workload_cookies(answer.headers, self.cookie_name), answer.chunks
                )
                await response(scope, receive, send)
        except UpstreamUnreachable as error:
            # Before any answer came: another replica may take it if nothing of it was
            # sent (refused), or if sending it twice is harmless (a read without a body,
            # lost on a kept-alive connection the replica had just closed).
            if retryable and (
                isinstance(error, UpstreamRefused) or (_replayable(request) and not has_body)
            ):
                raise
            await problem_response(_unreachable(port), request)(scope, receive, send)

    # --- WebSocket -----------------------------------------------------------------

    async def websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        socket = WebSocket(scope, receive, send)
        host = _host(socket.headers.get("host", ""))
        headers, cookies = dict(socket.headers), dict(socket.cookies)

        async def allowed() -> tuple[Principal, int, str]:
            """(caller, port, address), as at the handshake: checked again while open."""
            principal, via_cookie = await self._caller(headers, cookies, host)
            if via_cookie and is_cross_site(socket.headers, self._origin(host)):
                # A cookie rides along with any page's WebSocket: only the instance's own pages.
                raise Unauthenticated(
                    "a cookie-authenticated WebSocket must come from the instance's own origin"
                )
            # A WebSocket writes to the workload (a shell, a kernel): not for a suspended tenant.
            await self.authorizer.check_writable(principal, "CONNECT")
            _, port, address = await self.targets.instance(principal, host)
            return principal, port, address

        with contextlib.ExitStack() as held:
            try:
                principal, port, address = await allowed()
                assert principal.tenant_id is not None  # targets serve tenants alone
                held.enter_context(self.connections.slot(principal.tenant_id))
            except GpucloudError as error:
                await deny_handshake(socket, problem_response(error, socket))
                return
            except RelayedProblem as problem:
                await deny_handshake(socket, problem.response)
                return

            async def still_allowed() -> None:
                try:
                    _, _, now_at = await allowed()
                except RelayedProblem as problem:
                    raise no_longer_served(problem, port) from problem
                if now_at != address:
                    raise NotFound("the instance behind this WebSocket was replaced")

            await self._relay_websocket(socket, host, address, port, still_allowed)

    async def _relay_websocket(
        self,
        socket: WebSocket,
        host: str,
        address: str,
        port: int,
        still_allowed: Callable[[], Awaitable[None]],
    ) -> None:
        url = f"ws://{address}:{port}{socket.url.path}"
        if socket.url.query:
            url += f"?{socket.url.query}"
        client = client_address(socket, self.settings.trusted_proxies)
        headers = upstream_headers(
            socket.headers.items(), host, client, cookie_name=self.cookie_name,
            scheme=self.settings.instance_url_scheme, drop=WS_HANDSHAKE,
        )  # fmt: skip
        protocols = [
            p.strip()
            for p in socket.headers.get("sec-websocket-protocol", "").split(",")
            if p.strip()
        ]
        try:
            async with self.upstream.websocket(
                url,
                headers=headers,
                protocols=protocols,
                max_message_bytes=self.settings.websocket_max_message_bytes,
            ) as upstream:
                await socket.accept(subprotocol=upstream.protocol)
                await self.connections.hold(
                    socket, lambda activity: pump(socket, upstream, activity), still_allowed
                )
        except UpstreamUnreachable:
            refused = InstanceUnreachable(
                f"the instance's port {port} did not accept the WebSocket"
            )
            await deny_handshake(socket, problem_response(refused, socket))
        except GpucloudError as error:  # the egress policy refused the address
            await deny_handshake(socket, problem_response(error, socket))


_REPLAYABLE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def _replayable(request: Request) -> bool:
    return request.method in _REPLAYABLE_METHODS


def _unreachable(port: int) -> InstanceUnreachable:
    return InstanceUnreachable(
        f"the workload's port {port} did not answer; is the server inside listening?",
        retry_after_s=2,
    )


def _host(value: str) -> str:
    """A Host header without its port, lower-cased."""
    host = value.strip().lower()
    if host.startswith("["):
        return host.partition("]")[0] + "]"
    return host.rpartition(":")[0] if ":" in host else host


class InstanceHosts:
    """ASGI middleware: instance hosts go to the proxy; everything else to the API."""

    def __init__(self, app: ASGIApp, proxy: InstanceProxy) -> None:
        self.app = app
        self.proxy = proxy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in {"http", "websocket"}:
            host = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"host"), "")
            if self.proxy.serves(_host(host)):
                handler = self.proxy.http if scope["type"] == "http" else self.proxy.websocket
                await handler(scope, receive, send)
                return
        await self.app(scope, receive, send)
