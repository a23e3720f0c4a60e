"""Where the platform may dial (gpucloud_libs.egress): on a loopback-only stack, only
127.0.0.0/8, ::1 and `localhost`; any other address is refused by the caller with a
502 problem that names it, and by the socket factory before a socket exists."""

from __future__ import annotations

import errno
import socket

import pytest

from gpucloud_libs.egress import (
    EgressPolicy,
    EgressRefused,
    OutsideLoopback,
    is_loopback,
    refuse_outside_loopback,
    require_loopback_endpoints,
)

LOCAL = EgressPolicy(loopback_only=True)
OPEN = EgressPolicy(loopback_only=False)


@pytest.mark.parametrize(
    "host",
    ["localhost", "LOCALHOST", "localhost.", "127.0.0.1", "127.10.20.30", "127.255.255.254",
     "::1", "[::1]", "0:0:0:0:0:0:0:1"],
)  # fmt: skip
def test_loopback_addresses_and_localhost_are_loopback(host: str) -> None:
    assert is_loopback(host)


@pytest.mark.parametrize(
    "host",
    [
        "",
        "10.0.0.1",
        "169.254.169.254",  # the cloud metadata service
        "128.0.0.1",
        "0.0.0.0",  # noqa: S104  (it reaches this machine on Linux, but is not loopback)
        "::",
        "a.localhost",  # resolves as the resolver says
        "localhost.evil.test",
        "127.0.0.1.nip.io",
        "gateway",
    ],
)
def test_other_addresses_and_names_are_not_loopback(host: str) -> None:
    assert not is_loopback(host)


def test_a_loopback_only_stack_refuses_to_dial_outside_loopback_naming_the_address() -> None:
    with pytest.raises(
        EgressRefused, match=r"the webhook is at 10\.0\.0\.7, outside loopback"
    ) as raised:
        LOCAL.check("10.0.0.7", "the webhook")
    problem = raised.value.problem()
    assert (problem["status"], problem["code"], problem["address"]) == (
        502,
        "egress_refused",
        "10.0.0.7",
    )


def test_a_loopback_only_stack_dials_loopback() -> None:
    LOCAL.check("127.0.0.1")
    LOCAL.check_url("http://localhost:8080/hook")
    LOCAL.check_url("http://[::1]:9000/")


def test_production_dials_anywhere() -> None:
    OPEN.check("203.0.113.9")
    OPEN.check_url("https://hooks.example.com/x")
    assert OPEN.socket_factory() is None


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.example.com/x",
        "http://169.254.169.254/latest/meta-data",
        "http://127.0.0.1@10.0.0.1/",  # the host is after the userinfo
        "not a url",
        "",
    ],
)
def test_a_url_is_judged_by_its_host(url: str) -> None:
    with pytest.raises(EgressRefused):
        LOCAL.check_url(url)


def test_the_loopback_stacks_socket_factory_checks_every_connection() -> None:
    assert LOCAL.socket_factory() is refuse_outside_loopback


def test_the_socket_factory_refuses_an_address_outside_loopback_before_a_socket_exists() -> None:
    info = (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", ("10.0.0.1", 443))
    with pytest.raises(OutsideLoopback) as raised:
        refuse_outside_loopback(info)
    assert raised.value.errno == errno.EACCES
    assert isinstance(raised.value, OSError)  # what HTTP clients report as a failed connect
    v6 = (socket.AF_INET6, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", ("fe80::1%eth0", 443, 0, 2))
    with pytest.raises(OutsideLoopback):
        refuse_outside_loopback(v6)


def test_the_socket_factory_makes_a_nonblocking_socket_for_loopback() -> None:
    info = (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", ("127.0.0.1", 443))
    made = refuse_outside_loopback(info)
    try:
        assert (made.family, made.type) == (socket.AF_INET, socket.SOCK_STREAM)
        assert made.getblocking() is False
    finally:
        made.close()


@pytest.mark.parametrize(
    "endpoints",
    [
        {"mongo": "mongodb://gpucloud:secret@localhost:27017/gpucloud"},
        {"kafka": "127.0.0.1:9092,localhost:9093,[::1]:9094"},
        {"s3": "http://127.0.0.1:9000", "kube": "https://localhost:6443"},
        {"unused": ""},
    ],
)
def test_endpoints_all_on_loopback_pass_the_start_check(endpoints: dict[str, str]) -> None:
    require_loopback_endpoints(endpoints)


@pytest.mark.parametrize(
    ("endpoints", "names"),
    [
        ({"kafka": "127.0.0.1:9092,kafka:9092"}, "kafka (kafka:9092)"),
        ({"mongo": "mongodb://db.internal:27017"}, "mongo (mongodb://db.internal:27017)"),
        ({"s3": "http://127.0.0.1:9000", "kube": "https://10.96.0.1"}, "kube (https://10.96.0.1)"),
    ],
)
def test_the_first_endpoint_off_loopback_stops_the_start_and_is_named(
    endpoints: dict[str, str], names: str
) -> None:
    with pytest.raises(ValueError, match="is outside loopback") as raised:
        require_loopback_endpoints(endpoints)
    assert str(raised.value).startswith(names)
