"""Instance and inference-service URLs: the reverse proxy to the public ports of
running instances, and to the serving replicas of inference services.

Every `<instance>--<port>--<tenant>.<instance_domain>` host, and every
`<service>--<tenant>.<instance_domain>` host, reaches the gateway (a wildcard DNS
record). The gateway authenticates the caller by an `Authorization` header or by
the session cookie, lets only members of the owning tenant through, asks the
instances service where the port (or the service's replicas) are, and proxies
HTTP (streamed both ways) and WebSocket. A service's requests go to its least
busy replica (balancer.py); one that cannot connect is tried on another.

A browser gets its cookie from a one-minute link made by
`POST /v1/gpu-instances/{id}/ports/{port}/session`: the link's
`/_gpucloud/session` path swaps its token for a cookie bound to that one host,
so a cookie for one instance opens no other instance and not the API
(instance_cookies.py keeps the cookie to its host).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from urllib.parse import quote

from fastapi import Request, Response
from fastapi.responses import RedirectResponse
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket, WebSocketDisconnect

from gpucloud_libs.errors import (
    DependencyUnavailable,
    Forbidden,
    GpucloudError,
    NotFound,
    Unauthenticated,
)
from gpucloud_libs.http import problem_response
from gpucloud_libs.identity import IdentitySigner
from gpucloud_libs.naming import (
    instance_host,
    parse_instance_host,
    parse_service_host,
    public_origin,
)

from .authentication import Authenticator
from .authorization import Authorizer, InsufficientScope
from .balancer import ReplicaBalancer
from .cache import TtlCache
from .credentials import API_AUDIENCE
from .forwarding import exact_url, identity_headers, relay
from .instance_cookies import (
    is_cross_site,
    link_audience,
    require_same_site_for_changes,
    session_cookie_name,
    without_session_cookie,
    workload_cookies,
)
from .long_connections import Activity, LongConnections, both_ways
from .schemas import InstanceSession, Principal
from .service_load import ServiceLoad
from .sessions import Sessions
from .settings import GatewaySettings
from .store import SpentLinkStore
from .upstream import (
    Headers,
    StreamedResponse,
    Upstream,
    UpstreamRefused,
    UpstreamSocket,
    UpstreamUnreachable,
    forwardable,
)

SESSION_PATH = "/_gpucloud/session"
#: A Host header a workload may be told it was reached at: a host name, and digits
#: for a port; anything else is replaced by the bare host the gateway matched.
_HOST_AND_PORT = re.compile(r"[a-z0-9.-]+(:[0-9]{1,5})?")
#: The link that sets the cookie is good for this long.
SESSION_LINK_TTL_S = 60
_WS_HANDSHAKE = frozenset(
    {
        "sec-websocket-key",
        "sec-websocket-version",
        "sec-websocket-extensions",
        "sec-websocket-protocol",
    }
)


class InstanceUnreachable(GpucloudError):
    status = 502
    code = "instance_unreachable"
    title = "The instance did not answer"


class NoServingReplica(DependencyUnavailable):
    code = "no_serving_replica"
    title = "No replica of the service is serving"


class RelayedProblem(Exception):
    """The instances service refused; its problem document goes to the caller as is."""

    def __init__(self, status: int, headers: Headers, body: bytes) -> None:
        super().__init__(status)
        self.response = relay(status, headers, body)


class InstanceProxy:
    def __init__(
        self,
        settings: GatewaySettings,
        authenticator: Authenticator,
        sessions: Sessions,
        upstream: Upstream,
        signer: IdentitySigner,
        load: ServiceLoad,
        authorizer: Authorizer,
        connections: LongConnections,
        spent_links: SpentLinkStore,
    ) -> None:
        self.spent_links = spent_links
        self.settings = settings
        self.connections = connections
        self.load = load
        self.authenticator = authenticator
        self.authorizer = authorizer
        self.sessions = sessions
        self.upstream = upstream
        self.signer = signer
        self.egress = settings.egress
        self._domain_suffix = "." + settings.instance_domain
        self.cookie_name = session_cookie_name(settings)
        self._addresses = TtlCache[tuple[str, str, int, bool], str](
            settings.endpoint_cache_ttl_s, max_entries=10_000
        )
        self._replicas = TtlCache[tuple[str, str], tuple[list[str], int]](
            settings.service_endpoints_ttl_s, max_entries=10_000
        )
        self.balancer = ReplicaBalancer(cooldown_s=settings.replica_cooldown_s)

    def serves(self, host: str) -> bool:
        return host.endswith(self._domain_suffix)

    # --- the session link ----------------------------------------------------------

    async def open_session(
        self, principal: Principal, instance_id: str, port: int
    ) -> InstanceSession:
        tenant_id = principal.tenant_id
        if tenant_id is None or principal.service_ids is not None:
            raise NotFound(f"instance {instance_id!r} does not exist")
        if "instances:connect" not in principal.scopes:
            raise InsufficientScope("this credential lacks the scope 'instances:connect'")
        await self._instances_call(principal, f"/gpu-instances/{quote(instance_id)}")
        host = instance_host(instance_id, tenant_id, port, self.settings.instance_domain)
        claims = self.sessions.session_claims(
            principal, audience=link_audience(host), ttl_s=SESSION_LINK_TTL_S
        )
        token = self.sessions.sign_session(claims)
        return InstanceSession(
            url=public_origin(
                self.settings.instance_url_scheme, host, self.settings.instance_url_port
            )
            + f"{SESSION_PATH}?token={token}",
            expires_at=datetime.fromtimestamp(claims.expires_at, UTC),
        )

    async def _start_session(self, request: Request, host: str) -> Response:
        link = request.query_params.get("token")
        principal = await self.authenticator.authenticate_token(link, audience=link_audience(host))
        # Good once: the link sits in the URL, so in proxies' and ingress logs (review L9).
        assert link is not None  # authenticate_token refuses none
        digest = hashlib.sha256(link.encode()).hexdigest()
        expires = datetime.now(UTC) + timedelta(seconds=SESSION_LINK_TTL_S)
        if not await self.spent_links.spend(digest, expires):
            raise Unauthenticated(
                "this session link was already opened; ask for a new one (Open, or "
                "`gpucloud instances open`)"
            )
        claims = self.sessions.session_claims(
            principal, audience=host, ttl_s=self.settings.instance_session_ttl_s
        )
        target = request.query_params.get("next", "/")
        if not target.startswith("/") or target.startswith("//"):
            target = "/"  # never an open redirect
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(
            self.cookie_name,
            self.sessions.sign_session(claims),
            max_age=self.settings.instance_session_ttl_s,
            path="/",
            secure=self.settings.instance_cookie_secure,
            httponly=True,
            samesite="lax",
        )
        return response

    # --- who, and where to ---------------------------------------------------------

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

    async def _target(self, principal: Principal, host: str) -> tuple[str, int, str]:
        """(instance id, port, address) of the host, for the caller's tenant only."""
        parsed = (
            parse_instance_host(host, principal.tenant_id, self.settings.instance_domain)
            if principal.tenant_id
            else None
        )
        if parsed is None or principal.service_ids is not None:
            # A machine key of inference services opens no instance.
            raise NotFound(f"no instance of yours answers at {host}")
        if "instances:connect" not in principal.scopes:
            raise InsufficientScope("this credential lacks the scope 'instances:connect'")
        instance_id, port = parsed
        return instance_id, port, await self.address(principal, instance_id, port)

    async def address(
        self, principal: Principal, instance_id: str, port: int, *, tunnel: bool = False
    ) -> str:
        """The pod address behind one port of the caller's running instance (kept a few
        seconds): a public port for its URL, any declared TCP port for a tunnel."""

        async def resolve(_: tuple[str, str, int, bool]) -> str:
            path = f"/gpu-instances/{quote(instance_id)}/endpoints/{port}"
            query = "tunnel=true" if tunnel else ""
            address = str((await self._instances_call(principal, path, query))["address"])
            self.egress.check(address, f"instance {instance_id}")
            return address

        key = (principal.tenant_id or "", instance_id, port, tunnel)
        return await self._addresses.get(key, resolve)

    def _service_of(self, principal: Principal, host: str) -> str | None:
        """The service id of a service host of the caller's tenant, else None."""
        if principal.tenant_id is None:
            return None
        service_id = parse_service_host(host, principal.tenant_id, self.settings.instance_domain)
        if service_id is None:
            return None
        if "instances:connect" not in principal.scopes:
            raise InsufficientScope("this credential lacks the scope 'instances:connect'")
        if principal.service_ids is not None and service_id not in principal.service_ids:
            raise Forbidden(
                f"this key calls the inference services {principal.service_ids} only",
                service_ids=principal.service_ids,
            )
        return service_id

    async def _serving_replicas(
        self, principal: Principal, service_id: str, *, fresh: bool = False
    ) -> tuple[list[str], int]:
        """(addresses, port) of the service's serving replicas, a second old at most."""
        key = (principal.tenant_id or "", service_id)
        if fresh:
            self._replicas.forget(key)

        async def resolve(_: tuple[str, str]) -> tuple[list[str], int]:
            path = f"/inference-services/{quote(service_id)}/endpoints"
            body = await self._instances_call(principal, path)
            addresses, port = body.get("addresses"), body.get("port")
            if not isinstance(addresses, list) or not isinstance(port, int):
                raise InstanceUnreachable("the instances service answered without endpoints")
            for address in addresses:
                self.egress.check(str(address), f"a replica of service {service_id}")
            return [str(address) for address in addresses], port

        return await self._replicas.get(key, resolve)

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
            addresses, port = await self._serving_replicas(principal, service_id)
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
                    addresses, port = await self._serving_replicas(
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

    async def _instances_call(
        self, principal: Principal, path: str, query: str = ""
    ) -> dict[str, object]:
        """GET `path` (with `query`, without its `?`) of the instances service."""
        headers = identity_headers(
            self.signer, principal, service="instances", method="GET", path=path, query=query
        )
        try:
            response = await self.upstream.call(
                "GET",
                exact_url(f"{self.settings.instances_url}{path}", query),
                headers=headers,
            )
        except UpstreamUnreachable as error:
            raise InstanceUnreachable("the instances service did not answer; try again") from error
        if response.status != 200:
            raise RelayedProblem(response.status, response.headers, response.body)
        body: dict[str, object] = json.loads(response.body)
        return body

    def _upstream_headers(
        self,
        request_headers: list[tuple[str, str]],
        host: str,
        client: str,
        *,
        drop: frozenset[str] = frozenset(),
    ) -> Headers:
        """The caller's headers minus the gateway's credentials, plus X-Forwarded-*.
        X-Forwarded-Host is the Host as the caller sent it, port and all: a workload
        that writes its own absolute links (Jupyter's redirects) must name the port."""
        headers: Headers = []
        forwarded_host = host
        for name, value in request_headers:
            lower = name.lower()
            if lower == "host" and _HOST_AND_PORT.fullmatch(value.strip().lower()):
                forwarded_host = value.strip().lower()
            if lower in drop:
                continue
            if lower == "authorization" and value.partition(" ")[2].startswith(("gpc_", "gpt_")):
                continue  # ours, not the workload's
            if lower == "cookie":
                others = without_session_cookie(value, self.cookie_name)
                if others:
                    headers.append((name, others))
                continue
            headers.append((name, value))
        headers = forwardable(headers)
        headers += [
            ("X-Forwarded-Host", forwarded_host),
            ("X-Forwarded-Proto", self.settings.instance_url_scheme),
            ("X-Forwarded-For", client),
        ]
        return headers

    # --- HTTP ----------------------------------------------------------------------

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        host = _host(request.headers.get("host", ""))
        try:
            if request.url.path == SESSION_PATH:
                await (await self._start_session(request, host))(scope, receive, send)
                return
            principal, via_cookie = await self._caller(
                dict(request.headers), dict(request.cookies), host
            )
            if via_cookie:
                require_same_site_for_changes(request.method, request.headers, self._origin(host))
            await self.authorizer.check_writable(principal, request.method)
            service_id = self._service_of(principal, host)
            if service_id is not None:
                await self._proxy_service(
                    request, principal, host, service_id, (scope, receive, send)
                )
                return
            _, port, address = await self._target(principal, host)
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
        client = request.client.host if request.client else ""
        headers = self._upstream_headers(request.headers.items(), host, client)
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
            _, port, address = await self._target(principal, host)
            return principal, port, address

        with contextlib.ExitStack() as held:
            try:
                principal, port, address = await allowed()
                assert principal.tenant_id is not None  # _target serves tenants alone
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
        client = socket.client.host if socket.client else ""
        headers = self._upstream_headers(socket.headers.items(), host, client, drop=_WS_HANDSHAKE)
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
                    socket, lambda activity: _pump(socket, upstream, activity), still_allowed
                )
        except UpstreamUnreachable:
            refused = InstanceUnreachable(
                f"the instance's port {port} did not accept the WebSocket"
            )
            await deny_handshake(socket, problem_response(refused, socket))
        except GpucloudError as error:  # the egress policy refused the address
            await deny_handshake(socket, problem_response(error, socket))


async def _pump(socket: WebSocket, upstream: UpstreamSocket, activity: Activity) -> None:
    async def client_to_upstream() -> None:
        with contextlib.suppress(WebSocketDisconnect):
            while True:
                message = await socket.receive()
                if message["type"] == "websocket.disconnect":
                    return
                data = (
                    message.get("text") if message.get("text") is not None else message.get("bytes")
                )
                if data is not None:
                    activity.touch()
                    await upstream.send(data)

    async def upstream_to_client() -> None:
        async for frame in upstream.frames():
            activity.touch()
            if isinstance(frame, str):
                await socket.send_text(frame)
            else:
                await socket.send_bytes(frame)

    from_upstream = asyncio.ensure_future(upstream_to_client())
    done = await both_ways(client_to_upstream(), from_upstream, quiet=(WebSocketDisconnect,))
    for task in done:
        task.result()
    if from_upstream in done:
        with contextlib.suppress(RuntimeError):
            await socket.close(code=upstream.close_code or 1000)


_REPLAYABLE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def _replayable(request: Request) -> bool:
    return request.method in _REPLAYABLE_METHODS


def _unreachable(port: int) -> InstanceUnreachable:
    return InstanceUnreachable(
        f"the workload's port {port} did not answer; is the server inside listening?",
        retry_after_s=2,
    )


def no_longer_served(problem: RelayedProblem, port: int) -> GpucloudError:
    """The instances service's answer to an open connection's recheck: the instance is
    gone (a 4xx), or it could not say (a 5xx: an outage, not a refusal)."""
    if problem.response.status_code >= 500:
        return DependencyUnavailable("the instances service could not say where the instance is")
    return NotFound(f"the instance no longer serves port {port}")


async def deny_handshake(socket: WebSocket, response: Response) -> None:
    """Refuse the handshake with an HTTP problem where the server can, else close 1008."""
    try:
        await socket.send_denial_response(response)
    except RuntimeError:
        await socket.close(code=1008)


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
