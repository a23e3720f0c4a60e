"""Whose failed authentications an address bucket counts (address_guard.py): the TCP
peer, unless the peer is a trusted proxy, in which case the nearest X-Forwarded-For hop
that is not one; a client cannot pick its own bucket by writing the header."""

from __future__ import annotations

from ipaddress import IPv4Network, IPv6Network, ip_network

import httpx
import pytest
from starlette.requests import HTTPConnection, Request
from starlette.types import Receive, Scope, Send

from gpucloud_gateway.address_guard import AddressGuard, client_address
from gpucloud_gateway.ratelimit import RateLimiter
from gpucloud_gateway.settings import GatewaySettings
from gpucloud_libs.errors import Unauthenticated
from gpucloud_libs.http import problem_response

INGRESS = (ip_network("10.0.0.0/8"), ip_network("fd00::/8"))


def connection(peer: str | None, *forwarded_for: str) -> HTTPConnection:
    scope: Scope = {
        "type": "http",
        "method": "GET",
        "path": "/",
        "query_string": b"",
        "headers": [(b"x-forwarded-for", value.encode()) for value in forwarded_for],
        "client": (peer, 443) if peer is not None else None,
    }
    return HTTPConnection(scope)


@pytest.mark.parametrize(
    ("peer", "forwarded_for", "client"),
    [
        ("203.0.113.9", (), "203.0.113.9"),
        # An untrusted peer's header is its own claim: ignored.
        ("203.0.113.9", ("198.51.100.1",), "203.0.113.9"),
        ("10.0.0.2", ("198.51.100.1",), "198.51.100.1"),
        # The client wrote a hop of its own before the ingress appended the real one.
        ("10.0.0.2", ("6.6.6.6, 198.51.100.1",), "198.51.100.1"),
        ("10.0.0.2", ("6.6.6.6", "198.51.100.1"), "198.51.100.1"),  # two headers
        # Proxies of our own in the chain are skipped.
        ("10.0.0.2", ("198.51.100.1, 10.0.0.3, 10.9.9.9",), "198.51.100.1"),
        ("fd00::2", ("2001:db8::7",), "2001:db8::7"),
        # Nothing but our own proxies: the peer it is.
        ("10.0.0.2", ("10.0.0.3",), "10.0.0.2"),
        ("10.0.0.2", (), "10.0.0.2"),
        ("10.0.0.2", (" , ,",), "10.0.0.2"),
        # A hop that is no address is not one of our proxies: it is what was said.
        ("10.0.0.2", ("unknown",), "unknown"),
    ],
)
def test_the_client_is_the_nearest_hop_no_trusted_proxy_added(
    peer: str, forwarded_for: tuple[str, ...], client: str
) -> None:
    assert client_address(connection(peer, *forwarded_for), INGRESS) == client


def test_without_trusted_proxies_the_peer_is_the_client() -> None:
    assert client_address(connection("10.0.0.2", "198.51.100.1"), ()) == "10.0.0.2"


def test_a_connection_without_a_peer_is_the_empty_address() -> None:
    assert client_address(connection(None, "198.51.100.1"), INGRESS) == ""


async def _refuses_every_key(scope: Scope, receive: Receive, send: Send) -> None:
    request = Request(scope, receive)
    await problem_response(Unauthenticated("the API key is unknown"), request)(scope, receive, send)


def _client(trusted: tuple[IPv4Network | IPv6Network, ...]) -> httpx.AsyncClient:
    """A guard allowing two failed authentications per address, behind a peer at
    127.0.0.1 (the test transport's)."""
    settings = GatewaySettings(
        failed_auths_per_address_burst=2,
        failed_auths_per_address_per_s=0.001,
        trusted_proxies=trusted,
    )
    guard = AddressGuard(_refuses_every_key, settings=settings, limiter=RateLimiter())
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=guard), base_url="http://gw")


async def _statuses(client: httpx.AsyncClient, forwarded_for: str, count: int) -> list[int]:
    headers = {
        "Authorization": "Bearer gpc_made_up_0000000000000000",
        "X-Forwarded-For": forwarded_for,
    }
    return [(await client.get("/v1/specs", headers=headers)).status_code for _ in range(count)]


async def test_behind_a_trusted_ingress_each_client_has_its_own_bucket() -> None:
    async with _client((ip_network("127.0.0.0/8"),)) as client:
        assert await _statuses(client, "198.51.100.1", 3) == [401, 401, 429]
        assert await _statuses(client, "198.51.100.2", 2) == [401, 401]
        # Its own X-Forwarded-For hop does not give the first client a fresh bucket.
        assert await _statuses(client, "192.0.2.99, 198.51.100.1", 1) == [429]


async def test_an_untrusted_peer_cannot_choose_its_bucket_with_the_header() -> None:
    async with _client(()) as client:
        assert await _statuses(client, "198.51.100.1", 2) == [401, 401]
        assert await _statuses(client, "198.51.100.2", 1) == [429]


async def test_a_session_link_token_counts_as_a_credential() -> None:
    async with _client(()) as client:
        for _ in range(2):
            assert (await client.get("/v1/specs", params={"token": "gpt_x"})).status_code == 401
        assert (await client.get("/v1/specs")).status_code == 429
