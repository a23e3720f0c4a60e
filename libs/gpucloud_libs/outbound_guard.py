"""Where a URL a tenant names may make the platform connect: only globally routable
addresses, checked on the very connection that is made. A tenant's alert webhook
(monitoring) and its single sign-on provider (the gateway) are such URLs.

A URL is checked when it is saved (a clear 422), and again, for real, when a
connection is made: the guarded session resolves through `GuardedResolver`, so the
addresses it checks are the addresses it dials, and its socket factory checks the
peer once more as the socket is made, whatever path the address took. A name that
answered with a public address at creation and a private one later (DNS
rebinding) is refused at connection, before any packet is sent. Callers never
follow redirects: a 3xx is a failed attempt, not a new target.

On the local stack (`loopback_only`) the peer must be on loopback instead, so
nothing leaves the machine.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
from typing import Any
from urllib.parse import urlparse

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import AsyncResolver, ThreadedResolver

from gpucloud_libs.egress import nonblocking_socket
from gpucloud_libs.errors import ValidationFailed

#: IPv6 prefixes that carry an IPv4 address inside (NAT64, its local-use range, 6to4):
#: a global-looking address that reaches a private or metadata one.
_EMBEDDED_IPV4 = tuple(
    ipaddress.IPv6Network(prefix)
    for prefix in ("64:ff9b::/96", "64:ff9b:1::/48", "2002::/16", "::/96")
)


class PrivateAddress(OSError):
    """A URL's host is, or resolves to, an address the guard does not allow."""


Networks = tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]


class Reach:
    """Which peers a guarded connection may reach: global addresses, and the networks
    an operator allows (`allowed_networks`: where its own clusters' API servers are)."""

    def __init__(
        self, *, allow_private_networks: bool, loopback_only: bool, allowed_networks: Networks = ()
    ) -> None:
        self.allow_private_networks = allow_private_networks
        self.loopback_only = loopback_only
        self.allowed_networks = allowed_networks

    def require(self, host: str, address: str) -> None:
        peer = ipaddress.ip_address(address.split("%", maxsplit=1)[0])
        if any(peer in network for network in self.allowed_networks):
            return
        if self.loopback_only:
            if not peer.is_loopback:
                raise PrivateAddress(
                    errno.EACCES, f"{host} is {address}, outside loopback (a local stack)"
                )
            return
        # Not private, loopback, link-local (cloud metadata), shared (CGNAT),
        # multicast (which Python counts as global) or reserved. errno and strerror
        # both set: aiohttp quotes strerror in its connection error.
        if not self.allow_private_networks and (
            not peer.is_global
            or peer.is_multicast
            or any(peer in network for network in _EMBEDDED_IPV4)
        ):
            raise PrivateAddress(
                errno.EACCES, f"{host} is {address}, not a globally routable address"
            )

    def socket_factory(self, addr_info: tuple[Any, ...]) -> socket.socket:
        """aiohttp's socket factory: the peer is checked as the socket is made."""
        peer = str(addr_info[4][0])
        self.require(peer, peer)
        return nonblocking_socket(addr_info)


class GuardedResolver(AbstractResolver):
    """Resolves for aiohttp's connector, refusing a host with any non-global address."""

    def __init__(self, inner: AbstractResolver, reach: Reach) -> None:
        self._inner = inner
        self._reach = reach

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = await self._inner.resolve(host, port, family)
        for result in results:
            self._reach.require(host, result["host"])
        return results

    async def close(self) -> None:
        await self._inner.close()


class OutboundGuard:
    """A URL a tenant names must not make the control plane call its own internals."""

    def __init__(
        self,
        *,
        field: str,
        allow_private_networks: bool,
        loopback_only: bool = False,
        nameservers: list[str] | None = None,
        allowed_networks: Networks = (),
    ) -> None:
        """`field` names the URL in a 422 (`webhookURL`, `issuer`)."""
        self._field = field
        self._reach = Reach(
            allow_private_networks=allow_private_networks, loopback_only=loopback_only,
            allowed_networks=allowed_networks,
        )  # fmt: skip
        self._nameservers = nameservers or []

    def resolver(self) -> GuardedResolver:
        """For the guarded session's connector (and for the check at save time)."""
        inner: AbstractResolver = (
            AsyncResolver(nameservers=self._nameservers)
            if self._nameservers
            else ThreadedResolver()  # the system's resolver, off the event loop
        )
        return GuardedResolver(inner, self._reach)

    def check_shape(self, url: str) -> str:
        """The URL's host, if the URL is http(s) and any literal address in it is global.
        aiohttp dials a literal address without resolving, so it is checked here."""
        try:
            parsed = urlparse(url)
            host = parsed.hostname
        except ValueError:  # an unclosed [ of an IPv6 address, say
            host = None
        if host is None or parsed.scheme not in {"http", "https"}:
            raise ValidationFailed(f"{self._field} must be an http(s) URL")
        try:
            ipaddress.ip_address(host)
        except ValueError:
            return host  # a name: checked when resolved
        try:
            self._reach.require(host, host)
        except PrivateAddress as error:
            raise ValidationFailed(
                f"{self._field} must not point into a private network: {error}"
            ) from error
        return host

    async def check(self, url: str) -> None:
        """At save time: the URL's shape, and every address its host resolves to now."""
        host = self.check_shape(url)
        resolver = self.resolver()
        try:
            await resolver.resolve(host, 0, socket.AF_UNSPEC)
        except PrivateAddress as error:
            # Which address it resolved to stays out of the answer: it would let a
            # tenant map the platform's internal names.
            raise ValidationFailed(
                f"{self._field} must not point into a private network: {host} resolves to "
                "what is not a globally routable address"
            ) from error
        except (OSError, UnicodeError) as error:  # UnicodeError: not a name IDNA can write
            raise ValidationFailed(f"{self._field} host {host} does not resolve") from error
        finally:
            await resolver.close()

    def session(self, timeout_s: float) -> aiohttp.ClientSession:
        """A client session whose every connection goes through the guarded resolver."""
        connector = aiohttp.TCPConnector(
            resolver=self.resolver(),
            use_dns_cache=False,
            socket_factory=self._reach.socket_factory,
        )
        return aiohttp.ClientSession(
            connector=connector, timeout=aiohttp.ClientTimeout(total=timeout_s)
        )
