"""Limits per client address that hold before anyone is authenticated (review M8).

Every request carrying a made-up credential costs a database read, and every password
sign-in costs a scrypt, before the caller is known; per-key and per-tenant limits
cannot see them. So:

- each credential the gateway itself refuses (its own 401, not one a workload answers
  through its URL, and not a request that presented nothing, which costs no read)
  spends a token of its client address's bucket; while that bucket is empty, the
  address's requests are answered 429 unread: no credential is looked up, whoever
  they claim to be;
- each password sign-in takes a token of its address's own bucket before the scrypt
  (`Sessions.signed_in_user`).

The address is the TCP peer, or, when the peer is one of `trusted_proxies` (the
ingress), the nearest address in X-Forwarded-For that is not. An IPv6 address counts
as its /64, the block one subscriber is given, so that one host cannot walk its
block for fresh buckets. A flood from many addresses is the ingress's to limit
(docs/security.md).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from starlette.websockets import WebSocket

from gpucloud_libs.errors import GpucloudError
from gpucloud_libs.http import REFUSED_CREDENTIAL, problem_response

from .ratelimit import RateLimiter
from .settings import GatewaySettings

IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def _within(address: str, networks: Sequence[IpNetwork]) -> bool:
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(parsed in network for network in networks)


def client_address(connection: HTTPConnection, trusted_proxies: Sequence[IpNetwork]) -> str:
    """Who is at the other end, as far as the trusted proxies tell."""
    peer = connection.client.host if connection.client else ""
    if not _within(peer, trusted_proxies):
        return peer
    hops = [
        hop.strip()
        for value in connection.headers.getlist("x-forwarded-for")
        for hop in value.split(",")
        if hop.strip()
    ]
    for hop in reversed(hops):
        if not _within(hop, trusted_proxies):
            return hop
    return peer


def address_key(address: str) -> str:
    """The address as its limits count it: an IPv6 address as its /64."""
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(parsed, ipaddress.IPv6Address):
        if parsed.ipv4_mapped is not None:  # an IPv4 client of a dual-stack listener
            return str(parsed.ipv4_mapped)
        return str(ipaddress.IPv6Network((parsed, 64), strict=False))
    return str(parsed)


def _presents_a_credential(connection: HTTPConnection) -> bool:
    """A key, token, cookie or session link: something that costs a look-up to refuse."""
    return (
        "authorization" in connection.headers
        or "cookie" in connection.headers
        or "token" in connection.query_params
    )


class AddressGuard:
    """The outermost middleware: refuses an address that keeps failing authentication."""

    def __init__(self, app: ASGIApp, *, settings: GatewaySettings, limiter: RateLimiter) -> None:
        self.app = app
        self.limiter = limiter
        self.rate = settings.failed_auths_per_address_per_s
        self.burst = settings.failed_auths_per_address_burst
        self.trusted = settings.trusted_proxies

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in {"http", "websocket"}:
            await self.app(scope, receive, send)
            return
        connection = HTTPConnection(scope)
        key = f"failed-auth:{address_key(client_address(connection, self.trusted))}"
        try:
            self.limiter.check(
                key, rate=self.rate, burst=self.burst,
                what="this address, after failed authentications,",
            )  # fmt: skip
        except GpucloudError as error:
            await self._refuse(scope, receive, send, error)
            return

        presented = _presents_a_credential(connection)

        async def counting(message: Message) -> None:
            if (
                message["type"].endswith("response.start")
                and scope.get(REFUSED_CREDENTIAL)
                and presented
            ):
                self.limiter.spend(key, rate=self.rate, burst=self.burst)
            await send(message)

        await self.app(scope, receive, counting)

    async def _refuse(
        self, scope: Scope, receive: Receive, send: Send, error: GpucloudError
    ) -> None:
        if scope["type"] == "http":
            await problem_response(error, HTTPConnection(scope))(scope, receive, send)
            return
        socket = WebSocket(scope, receive, send)
        try:
            await socket.send_denial_response(problem_response(error, socket))
        except RuntimeError:  # the server cannot answer a handshake with HTTP
            await socket.close(code=1008)
