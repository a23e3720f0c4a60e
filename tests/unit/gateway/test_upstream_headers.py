"""What travels past the gateway, header by header: to an instance's workload
(instance_relay.upstream_headers) the caller's headers without the gateway's own
credentials, plus X-Forwarded-*; to a service (forwarding.py) the headers without any
credential, a signed identity good for that one request, the URL byte for byte; and
back to the caller, the service's answer with repeated headers kept."""

from __future__ import annotations

import pytest

from gpucloud_gateway.forwarding import (
    GATEWAY_ONLY_HEADERS,
    exact_url,
    identity_headers,
    relay,
)
from gpucloud_gateway.instance_relay import WS_HANDSHAKE, upstream_headers
from gpucloud_gateway.schemas import Principal
from gpucloud_gateway.upstream import HOP_BY_HOP, Headers, forwardable
from gpucloud_libs.errors import Unauthenticated
from gpucloud_libs.identity import (
    IDENTITY_HEADER,
    IdentitySigner,
    IdentityVerifier,
    generate_key_pair,
)

COOKIE = "__Host-gpucloud_session"
HOST = "nb-1--8888--t-a.instances.example.com"
PRIVATE, PUBLIC = generate_key_pair()
SIGNER = IdentitySigner("gateway", PRIVATE, setting="TEST")
ADA = Principal(
    subject="u-ada", user_id="u-ada", key_id="k-1", role="tenant-user", tenant_id="t-a",
    scopes=["instances:read", "instances:write"], via="api_key",
)  # fmt: skip


def to_workload(
    headers: Headers, *, scheme: str = "https", drop: frozenset[str] = frozenset()
) -> Headers:
    """`headers` as the workload behind HOST gets them from client 203.0.113.9."""
    return upstream_headers(
        headers, HOST, "203.0.113.9", cookie_name=COOKIE, scheme=scheme, drop=drop
    )


def named(headers: Headers, name: str) -> list[str]:
    return [value for key, value in headers if key.lower() == name]


def verifier(audience: str) -> IdentityVerifier:
    return IdentityVerifier({"gateway": PUBLIC}, setting="TEST", audience=audience)


@pytest.mark.parametrize("credential", ["Bearer gpc_k1_" + "s" * 43, "bearer gpt_abc.def"])
def test_the_gateways_own_bearer_credential_never_reaches_the_workload(credential: str) -> None:
    sent = to_workload([("Authorization", credential), ("Accept", "text/html")])
    assert named(sent, "authorization") == []
    assert named(sent, "accept") == ["text/html"]


@pytest.mark.parametrize(
    "credential", ["Bearer eyJhbGciOiJIUzI1NiJ9.e30.x", "Basic dXNlcjpwYXNz", "token abc"]
)
def test_the_workloads_own_authorization_passes_untouched(credential: str) -> None:
    assert named(to_workload([("Authorization", credential)]), "authorization") == [credential]


def test_the_workload_gets_its_own_cookies_without_the_gateways() -> None:
    sent = to_workload([("Cookie", f"_xsrf=abc; {COOKIE}=gpt_secret; theme=dark")])
    assert named(sent, "cookie") == ["_xsrf=abc; theme=dark"]


def test_a_cookie_header_holding_only_the_gateways_cookie_is_left_out() -> None:
    assert named(to_workload([("Cookie", f"{COOKIE}=gpt_secret")]), "cookie") == []


def test_forwarded_headers_say_the_host_as_sent_the_scheme_and_the_client() -> None:
    sent = to_workload([("Host", f"{HOST}:8443"), ("User-Agent", "curl/8")], scheme="http")
    assert sent[-3:] == [
        ("X-Forwarded-Host", f"{HOST}:8443"),
        ("X-Forwarded-Proto", "http"),
        ("X-Forwarded-For", "203.0.113.9"),
    ]
    assert named(sent, "host") == []  # the upstream connection sets its own
    assert named(sent, "user-agent") == ["curl/8"]


@pytest.mark.parametrize(
    "host",
    ["evil.example/path", "a b", "host:99999999", "<script>", "host:", "ünïcode.example"],
)
def test_a_host_header_that_is_no_host_is_replaced_by_the_host_matched(host: str) -> None:
    assert named(to_workload([("Host", host)]), "x-forwarded-host") == [HOST]


def test_a_host_header_is_lower_cased_for_the_workload() -> None:
    assert named(
        to_workload([("Host", " NB-1--8888--T-A.Instances.Example.COM ")]), "x-forwarded-host"
    ) == [HOST]


def test_a_websocket_handshake_leaves_its_own_headers_to_the_upstream_handshake() -> None:
    caller = [
        ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
        ("Sec-WebSocket-Version", "13"),
        ("Sec-WebSocket-Extensions", "permessage-deflate"),
        ("Sec-WebSocket-Protocol", "v1.kernel.websocket.jupyter.org"),
        ("Upgrade", "websocket"),
        ("Connection", "Upgrade"),
        ("Origin", f"https://{HOST}"),
    ]
    sent = to_workload(caller, drop=WS_HANDSHAKE)
    assert [name for name, _ in sent] == [
        "Origin",
        "X-Forwarded-Host",
        "X-Forwarded-Proto",
        "X-Forwarded-For",
    ]


def test_connection_level_headers_are_never_forwarded() -> None:
    caller = [(name.title(), "x") for name in sorted(HOP_BY_HOP)] + [("X-Request-Id", "r-1")]
    assert forwardable(caller) == [("X-Request-Id", "r-1")]


def test_a_service_gets_no_credential_nor_an_identity_the_caller_wrote() -> None:
    caller = [
        ("Authorization", "Bearer gpc_k1_secret"),
        ("Cookie", "gpucloud_console=abc"),
        ("X-Gpucloud-Identity", "forged"),
        ("x-gpucloud-identity", "forged again"),
        ("Content-Type", "application/json"),
        ("Transfer-Encoding", "chunked"),
    ]
    assert forwardable(caller, drop=GATEWAY_ONLY_HEADERS) == [("Content-Type", "application/json")]


def test_the_identity_is_signed_for_the_one_request_and_service() -> None:
    headers = identity_headers(
        SIGNER, ADA, service="instances", method="post", path="/gpu-instances",
        query="dryRun=true", body=b'{"name":"nb-1"}',
    )  # fmt: skip
    assert headers[0][0] == IDENTITY_HEADER
    assert [name for name, _ in headers].count(IDENTITY_HEADER) == 1
    identity = verifier("instances").verify(
        headers[0][1], method="POST", path="/gpu-instances", query="dryRun=true",
        body=b'{"name":"nb-1"}',
    )  # fmt: skip
    assert (identity.subject, identity.role, identity.tenant_id, identity.issuer) == (
        "u-ada",
        "tenant-user",
        "t-a",
        "gateway",
    )


@pytest.mark.parametrize(
    ("audience", "method", "path", "query", "body"),
    [
        ("storage", "POST", "/gpu-instances", "", b"{}"),
        ("instances", "DELETE", "/gpu-instances", "", b"{}"),
        ("instances", "POST", "/gpu-instances/other", "", b"{}"),
        ("instances", "POST", "/gpu-instances", "tenantID=t-b", b"{}"),
        ("instances", "POST", "/gpu-instances", "", b'{"gpus":8}'),
    ],
)
def test_the_identity_is_refused_for_any_other_request(
    audience: str, method: str, path: str, query: str, body: bytes
) -> None:
    (token,) = [
        value
        for name, value in identity_headers(
            SIGNER, ADA, service="instances", method="POST", path="/gpu-instances", body=b"{}"
        )
        if name == IDENTITY_HEADER
    ]
    with pytest.raises(Unauthenticated):
        verifier(audience).verify(token, method=method, path=path, query=query, body=body)


def test_the_url_is_sent_exactly_as_written_never_requoted() -> None:
    url = exact_url("http://127.0.0.1:8001/storages/a%2Fb%252F", "prefix=x%20y&n=%2F")
    assert str(url) == "http://127.0.0.1:8001/storages/a%2Fb%252F?prefix=x%20y&n=%2F"
    assert url.raw_path == "/storages/a%2Fb%252F"
    assert str(exact_url("http://127.0.0.1:8001/specs", "")) == "http://127.0.0.1:8001/specs"


def test_a_services_answer_is_relayed_with_each_repeated_header() -> None:
    response = relay(
        409,
        [
            ("Set-Cookie", "a=1"),
            ("Set-Cookie", "b=2"),
            ("Content-Type", "application/problem+json"),
        ],
        b'{"code":"conflict"}',
    )
    assert response.status_code == 409
    assert response.body == b'{"code":"conflict"}'
    assert [v for k, v in response.raw_headers if k == b"set-cookie"] == [b"a=1", b"b=2"]
    assert (b"content-type", b"application/problem+json") in response.raw_headers


def test_the_callers_own_forwarding_headers_never_reach_the_workload() -> None:
    """A workload that reads the first X-Forwarded-For (or Forwarded, X-Real-IP) sees the
    gateway's word on who called, never the caller's claim."""
    caller = [
        ("X-Forwarded-For", "10.0.0.1"),
        ("X-Forwarded-Host", "admin.internal"),
        ("X-Forwarded-Proto", "https"),
        ("Forwarded", "for=10.0.0.1;host=admin.internal"),
        ("X-Real-IP", "10.0.0.1"),
        ("Accept", "*/*"),
    ]
    sent = to_workload(caller, scheme="http")
    assert named(sent, "x-forwarded-for") == ["203.0.113.9"]
    assert named(sent, "x-forwarded-host") == [HOST]
    assert named(sent, "x-forwarded-proto") == ["http"]
    assert named(sent, "forwarded") == named(sent, "x-real-ip") == []
    assert named(sent, "accept") == ["*/*"]
