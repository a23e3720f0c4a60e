"""Where a webhook may point: only globally routable addresses, checked on the very
connection that delivers.

A rule's URL is checked when it is saved (a clear 422), and again, for real,
when a delivery connects: the delivery session resolves through
`GuardedResolver`, so the addresses it checks are the addresses it dials. A name
that answered with a public address at creation and a private one later (DNS
rebinding) is refused at delivery, before any connection is made.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
from urllib.parse import urlparse

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import AsyncResolver, ThreadedResolver

from gpucloud_libs.errors import ValidationFailed


class PrivateAddress(OSError):
    """A webhook's host is, or resolves to, an address that is not global."""


def _require_global(host: str, address: str) -> None:
    # Not private, loopback, link-local (cloud metadata), shared (CGNAT),
    # multicast or reserved.
    if not ipaddress.ip_address(address).is_global:
        # errno and strerror both set: aiohttp quotes strerror in its connection error.
        raise PrivateAddress(errno.EACCES, f"{host} is {address}, not a globally routable address")


class GuardedResolver(AbstractResolver):
    """Resolves for aiohttp's connector, refusing a host with any non-global address."""

    def __init__(self, inner: AbstractResolver, *, allow_private_networks: bool) -> None:
        self._inner = inner
        self._allow_private_networks = allow_private_networks

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = await self._inner.resolve(host, port, family)
        if not self._allow_private_networks:
            for result in results:
                _require_global(host, result["host"])
        return results

    async def close(self) -> None:
        await self._inner.close()


class WebhookGuard:
    """A tenant's rule must not make the control plane call its own internals."""

    def __init__(
        self, *, allow_private_networks: bool, nameservers: list[str] | None = None
    ) -> None:
        self._allow_private_networks = allow_private_networks
        self._nameservers = nameservers or []

    def resolver(self) -> GuardedResolver:
        """For the delivery session's connector (and for the check at save time)."""
        inner: AbstractResolver = (
            AsyncResolver(nameservers=self._nameservers)
            if self._nameservers
            else ThreadedResolver()  # the system's resolver, off the event loop
        )
        return GuardedResolver(inner, allow_private_networks=self._allow_private_networks)

    def check_shape(self, url: str) -> str:
        """The URL's host, if the URL is http(s) and any literal address in it is global.
        aiohttp dials a literal address without resolving, so it is checked here."""
        parsed = urlparse(url)
        if parsed.scheme not in {"http", "https"} or not parsed.hostname:
            raise ValidationFailed("webhookURL must be an http(s) URL")
        host = parsed.hostname
        if not self._allow_private_networks:
            try:
                ipaddress.ip_address(host)
            except ValueError:
                return host  # a name: checked when resolved
            try:
                _require_global(host, host)
            except PrivateAddress as error:
                raise ValidationFailed(
                    f"webhookURL must not point into a private network: {error}"
                ) from error
        return host

    async def check(self, url: str) -> None:
        """At save time: the URL's shape, and every address its host resolves to now."""
        host = self.check_shape(url)
        resolver = self.resolver()
        try:
            await resolver.resolve(host, 0, socket.AF_UNSPEC)
        except PrivateAddress as error:
            raise ValidationFailed(
                f"webhookURL must not point into a private network: {error}"
            ) from error
        except OSError as error:
            raise ValidationFailed(f"webhookURL host does not resolve: {error}") from error
        finally:
            await resolver.close()

    def session(self, timeout_s: float) -> aiohttp.ClientSession:
        """A client session whose every connection goes through the guarded resolver."""
        connector = aiohttp.TCPConnector(resolver=self.resolver(), use_dns_cache=False)
        return aiohttp.ClientSession(
            connector=connector, timeout=aiohttp.ClientTimeout(total=timeout_s)
        )
