"""Where a rule's webhook may point and how a delivery is signed (gpucloud_libs.outbound_guard,
webhook_secrets.py): the URL's shape, literal addresses and other spellings of
loopback, answers that change between save and delivery (a resolver that answers what
the test says), the socket check, the local stack's loopback-only reach, and the
signature a receiver checks."""

from __future__ import annotations

import errno
import hashlib
import hmac
import ipaddress
import re
import socket

import pytest
from aiohttp.abc import AbstractResolver, ResolveResult

from gpucloud_libs.errors import ValidationFailed
from gpucloud_libs.outbound_guard import GuardedResolver, OutboundGuard, PrivateAddress, Reach
from gpucloud_monitoring.webhook_secrets import SECRET_PREFIX, WebhookSecrets, signature

PUBLIC = Reach(allow_private_networks=False, loopback_only=False)
ANYWHERE = Reach(allow_private_networks=True, loopback_only=False)
LOOPBACK = Reach(allow_private_networks=False, loopback_only=True)


class Answers(AbstractResolver):
    """A name server that answers `addresses` for every name."""

    def __init__(self, *addresses: str) -> None:
        self.addresses = addresses
        self.closed = False

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        return [
            ResolveResult(hostname=host, host=address, port=port, family=family, proto=0, flags=0)
            for address in self.addresses
        ]

    async def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize("address", ["93.184.216.34", "1.1.1.1", "2606:4700:4700::1111"])
def test_a_global_address_is_reachable(address: str) -> None:
    PUBLIC.require("hooks.example.com", address)


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "0.0.0.0",  # noqa: S104 - an address refused, not bound
        "255.255.255.255",
        "::1",
        "fc00::1",
        "fe80::1%eth0",  # a scoped address: the zone is not part of the address
        "::ffff:10.0.0.1",
        "64:ff9b::808:808",  # NAT64 of a public address: still refused
        # Multicast, which Python counts as global.
        "224.0.0.1",
        "239.255.255.250",
        "ff02::1",
        "ff0e::1",
    ],
)
def test_an_address_outside_the_internet_is_refused_with_eacces(address: str) -> None:
    with pytest.raises(PrivateAddress) as refused:
        PUBLIC.require("hooks.example.com", address)
    assert refused.value.errno == errno.EACCES
    assert (
        refused.value.strerror == f"hooks.example.com is {address}, not a globally routable address"
    )
    ANYWHERE.require("hooks.example.com", address)  # an operator's choice to allow


@pytest.mark.parametrize(("address", "allowed"), [("127.0.0.1", True), ("127.8.9.10", True),
                                                  ("::1", True), ("10.0.0.1", False),
                                                  ("93.184.216.34", False)])  # fmt: skip
def test_the_local_stack_reaches_loopback_alone(address: str, allowed: bool) -> None:
    if allowed:
        LOOPBACK.require("receiver", address)
        return
    with pytest.raises(PrivateAddress, match=r"outside loopback \(a local stack\)"):
        LOOPBACK.require("receiver", address)


@pytest.mark.parametrize(
    ("url", "host"),
    [
        ("https://hooks.example.com/alerts", "hooks.example.com"),
        ("https://HOOKS.Example.COM:8443/a?b=c", "hooks.example.com"),
        ("http://user:secret@93.184.216.34:8080/x", "93.184.216.34"),
        ("https://[2606:4700:4700::1111]/hook", "2606:4700:4700::1111"),
    ],
)
def test_the_shape_check_gives_the_host_to_resolve(url: str, host: str) -> None:
    assert OutboundGuard(field="webhookURL", allow_private_networks=False).check_shape(url) == host


@pytest.mark.parametrize(
    "url",
    ["ftp://hooks.example.com/", "file:///etc/passwd", "javascript:alert(1)",
     "hooks.example.com/alerts", "http:///no-host", "https://:443/", ""],
)  # fmt: skip
def test_a_url_that_is_not_http_to_a_host_is_refused(url: str) -> None:
    with pytest.raises(ValidationFailed, match="webhookURL must be an http"):
        OutboundGuard(field="webhookURL", allow_private_networks=True).check_shape(url)


def test_a_private_literal_is_refused_by_its_shape_alone() -> None:
    with pytest.raises(ValidationFailed) as refused:
        OutboundGuard(field="webhookURL", allow_private_networks=False).check_shape(
            "http://10.0.0.7:9000/hook"
        )
    assert refused.value.detail == (
        "webhookURL must not point into a private network: "
        "[Errno 13] 10.0.0.7 is 10.0.0.7, not a globally routable address"
    )


@pytest.mark.parametrize(
    "url",
    ["http://localhost/hook", "http://2130706433/hook", "http://127.1/hook", "http://0x7f.0.0.1/"],
)
async def test_other_spellings_of_loopback_are_refused_when_resolved(url: str) -> None:
    """Not literal addresses to `ipaddress`, but the system resolver reads them as
    127.0.0.1: the save-time check resolves them, as a delivery would."""
    guard = OutboundGuard(field="webhookURL", allow_private_networks=False)
    guard.check_shape(url)  # a name, as far as the shape goes
    with pytest.raises(ValidationFailed, match="not a globally routable address"):
        await guard.check(url)


async def test_a_name_is_refused_if_any_of_its_addresses_is_private() -> None:
    """A name that answers a public and a private address (or answers differently at
    delivery than at save: DNS rebinding) is refused before any connection."""
    inner = Answers("93.184.216.34", "10.0.0.5")
    resolver = GuardedResolver(inner, PUBLIC)
    with pytest.raises(PrivateAddress, match=r"rebind\.example is 10\.0\.0\.5"):
        await resolver.resolve("rebind.example", 443)
    await resolver.close()
    assert inner.closed


async def test_a_name_with_only_global_addresses_resolves_to_them() -> None:
    resolver = GuardedResolver(Answers("93.184.216.34", "2606:4700::1"), PUBLIC)
    found = await resolver.resolve("hooks.example.com", 443)
    assert [(r["host"], r["port"]) for r in found] == [
        ("93.184.216.34", 443),
        ("2606:4700::1", 443),
    ]


def test_the_socket_is_refused_for_a_private_peer_before_it_is_made() -> None:
    with pytest.raises(PrivateAddress, match=re.escape("169.254.169.254 is 169.254.169.254")):
        PUBLIC.socket_factory((socket.AF_INET, socket.SOCK_STREAM, 6, "", ("169.254.169.254", 80)))
    made = PUBLIC.socket_factory(
        (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", 443))
    )
    try:
        assert made.family == socket.AF_INET
        assert made.getblocking() is False
    finally:
        made.close()


def test_a_signature_is_an_hmac_of_the_time_and_the_body() -> None:
    body = b'{"state":"firing"}'
    expected = hmac.new(b"whsec_abc", b"1700000000." + body, hashlib.sha256).hexdigest()
    assert signature("whsec_abc", body, 1_700_000_000) == f"t=1700000000,v1={expected}"


def test_a_signature_changes_with_the_secret_the_body_and_the_time() -> None:
    body = b'{"state":"firing"}'
    base = signature("whsec_abc", body, 1_700_000_000)
    assert signature("whsec_abd", body, 1_700_000_000) != base
    assert signature("whsec_abc", body + b" ", 1_700_000_000) != base
    assert signature("whsec_abc", body, 1_700_000_001) != base


def test_each_new_secret_is_fresh_and_marked_as_a_webhook_secret() -> None:
    box = WebhookSecrets(WebhookSecrets.generate_key())
    (first, sealed_first), (second, _) = box.new(), box.new()
    assert first.startswith(SECRET_PREFIX)
    assert len(first) > len(SECRET_PREFIX) + 40
    assert first != second
    assert box.open(sealed_first) == first


@pytest.mark.parametrize("url", ["http://[::1/hook", "http://exa\U000f881fmple.com/hook"])
async def test_a_url_that_cannot_be_parsed_or_resolved_is_a_422(url: str) -> None:
    with pytest.raises(ValidationFailed, match=r"must be an http|does not resolve"):
        await OutboundGuard(field="webhookURL", allow_private_networks=False).check(url)


def test_an_operators_allowed_network_is_reached_and_no_other_private_one() -> None:
    """An in-house provider or a cluster's API server on a private range the operator
    names (review L2, N2): that range alone opens, not every private address."""
    allowed = Reach(
        allow_private_networks=False, loopback_only=False,
        allowed_networks=(ipaddress.ip_network("198.18.7.0/24"),),
    )  # fmt: skip
    allowed.require("sso.internal", "198.18.7.20")
    for elsewhere in ("198.18.8.1", "127.0.0.1", "169.254.169.254"):
        with pytest.raises(PrivateAddress):
            allowed.require("sso.internal", elsewhere)
