"""Where the platform may dial: on the local stack, loopback alone.

The local stack runs every service with `loopback_only` (GPUCLOUD_LOOPBACK_ONLY):
its kwok pods have 127.x addresses, its webhooks' receivers listen on this machine,
and nothing the product dials on a user's behalf (an instance's port, a service's
replica, a tunnel, a webhook) may leave it. The Helm chart leaves it off.

The check is made twice: by the caller on the address it is about to dial (a clear
502 naming the address), and by `refuse_outside_loopback` as the socket factory of
every outgoing connection, so an address that reached a dial by another path is
refused before the socket exists: not one packet leaves.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
from typing import Any
from urllib.parse import urlsplit

from .errors import GpucloudError

#: `localhost` is loopback by RFC 6761 (and /etc/hosts); any other name, even one
#: under `.localhost`, resolves as the system's resolver says and is not trusted here.
_LOOPBACK_NAMES = frozenset({"localhost"})


class EgressRefused(GpucloudError):
    """The platform was about to dial an address its egress policy forbids."""

    status = 502
    code = "egress_refused"
    title = "The platform may not dial that address"


class OutsideLoopback(OSError):
    """Raised by the socket factory: an OSError, so HTTP clients report it as a
    connection that could not be made."""


def is_loopback(host: str) -> bool:
    """`host` is a literal loopback address (127.0.0.0/8, ::1) or `localhost`."""
    if host.lower().rstrip(".") in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class EgressPolicy:
    """What a service may dial: anything (production), or loopback alone (local)."""

    def __init__(self, *, loopback_only: bool) -> None:
        self.loopback_only = loopback_only

    def check(self, address: str, what: str = "the upstream") -> None:
        """Raises EgressRefused when `address` (an IP or a name) may not be dialed."""
        if self.loopback_only and not is_loopback(address):
            raise EgressRefused(
                f"{what} is at {address}, outside loopback; this stack dials 127.0.0.0/8 "
                "and ::1 only (GPUCLOUD_LOOPBACK_ONLY)",
                address=address,
            )

    def check_url(self, url: str, what: str = "the upstream") -> None:
        self.check(urlsplit(url).hostname or "", what)

    def socket_factory(self) -> Any:
        """For an HTTP client's connector (aiohttp's `socket_factory`): None when any
        address may be dialed."""
        return refuse_outside_loopback if self.loopback_only else None


def refuse_outside_loopback(addr_info: tuple[Any, ...]) -> socket.socket:
    """A socket for `addr_info` (family, type, proto, canonname, sockaddr), made only
    when its address is loopback: the check sits on the connection itself, after any
    name resolution, so no resolver answer can steer a dial off the machine."""
    address = str(addr_info[4][0])
    if not ipaddress.ip_address(address.split("%", maxsplit=1)[0]).is_loopback:
        raise OutsideLoopback(
            errno.EACCES, f"{address} is outside loopback; this stack dials loopback only"
        )
    return nonblocking_socket(addr_info)


def nonblocking_socket(addr_info: tuple[Any, ...]) -> socket.socket:
    """The socket an HTTP client's connector would make for `addr_info`: what a socket
    factory returns once its check has passed."""
    family, kind, proto, _, _ = addr_info
    made = socket.socket(family=family, type=kind, proto=proto)
    made.setblocking(False)
    return made


def require_loopback_endpoints(endpoints: dict[str, str]) -> None:
    """At start: every configured endpoint (`name: url or host:port`) is on loopback.
    Raises ValueError naming the first that is not."""
    for name, endpoint in endpoints.items():
        for part in filter(None, (piece.strip() for piece in endpoint.split(","))):
            host = urlsplit(part if "://" in part else f"//{part}").hostname or ""
            if not is_loopback(host):
                raise ValueError(
                    f"{name} ({part}) is outside loopback, and GPUCLOUD_LOOPBACK_ONLY is set"
                )
