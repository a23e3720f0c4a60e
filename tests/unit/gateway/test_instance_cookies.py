"""The instance session cookie and the cookies a workload may set (instance_cookies.py):
the cookie's name, the gateway's cookie kept from the workload and the workload's
Domain cookies kept from the browser, and which requests count as cross-site for a
change made with the cookie."""

from __future__ import annotations

import pytest

from gpucloud_gateway.instance_cookies import (
    is_cross_site,
    link_audience,
    require_same_site_for_changes,
    session_cookie_name,
    without_session_cookie,
    workload_cookies,
)
from gpucloud_gateway.settings import GatewaySettings
from gpucloud_libs.errors import Forbidden

COOKIE = "__Host-gpucloud_session"
ORIGIN = "https://nb-1--8888--t-a.instances.example.com"


def test_over_https_the_cookie_is_a_host_cookie_and_over_http_a_bare_one() -> None:
    assert session_cookie_name(GatewaySettings()) == COOKIE
    plain = GatewaySettings(instance_cookie_secure=False, instance_cookie_name="sess")
    assert session_cookie_name(plain) == "sess"


def test_a_link_is_minted_for_its_one_host() -> None:
    assert link_audience("nb-1--8888--t-a.instances.example.com") == (
        "link:nb-1--8888--t-a.instances.example.com"
    )


@pytest.mark.parametrize(
    ("header", "left"),
    [
        (f"{COOKIE}=gpt_secret", ""),
        (f"{COOKIE}=gpt_secret; _xsrf=abc", "_xsrf=abc"),
        (f"_xsrf=abc; {COOKIE}=gpt_secret; theme=dark", "_xsrf=abc; theme=dark"),
        (f"_xsrf=abc;{COOKIE}=gpt_secret", "_xsrf=abc"),
        (f"  {COOKIE} =gpt_secret ; a=1", "a=1"),
        # Cookies whose names merely contain the gateway's stay.
        (f"x{COOKIE}=1; {COOKIE}x=2", f"x{COOKIE}=1; {COOKIE}x=2"),
        ("a=1; b=2", "a=1; b=2"),
        ("", ""),
    ],
)
def test_the_workload_gets_every_cookie_but_the_gateways(header: str, left: str) -> None:
    assert without_session_cookie(header, COOKIE) == left


def test_every_copy_of_the_gateways_cookie_is_kept_from_the_workload() -> None:
    header = f"{COOKIE}=one; a=1; {COOKIE}=two"
    assert without_session_cookie(header, COOKIE) == "a=1"


def test_a_workload_may_set_its_own_host_only_cookies() -> None:
    headers = [
        ("Content-Type", "text/html"),
        ("Set-Cookie", "_xsrf=abc; Path=/; HttpOnly"),
        ("set-cookie", "username-localhost-8888=2|1:0|10:17; Path=/; SameSite=Lax"),
        ("Cache-Control", "no-cache"),
    ]
    assert workload_cookies(headers, COOKIE) == headers


@pytest.mark.parametrize(
    "set_cookie",
    [
        "track=1; Domain=instances.example.com; Path=/",
        "track=1; domain=.example.com",
        "track=1; Path=/;DOMAIN=instances.example.com",
        "track=1; Path=/; Domain",
    ],
)
def test_a_workload_cookie_naming_a_domain_is_dropped(set_cookie: str) -> None:
    """It would reach every instance host of the domain, other tenants' too."""
    headers = [("Set-Cookie", set_cookie), ("X-Kept", "yes")]
    assert workload_cookies(headers, COOKIE) == [("X-Kept", "yes")]


@pytest.mark.parametrize(
    "set_cookie",
    [
        f"{COOKIE}=gpt_forged; Path=/; Secure",
        "gpucloud_session=gpt_forged; Path=/",  # the bare name, for a plain-http deployment
        " gpucloud_session =gpt_forged",
    ],
)
def test_a_workload_cannot_set_or_clear_the_gateways_cookie(set_cookie: str) -> None:
    assert workload_cookies([("Set-Cookie", set_cookie)], COOKIE) == []


def test_a_domain_in_a_value_or_another_header_is_not_a_domain_attribute() -> None:
    headers = [
        ("Set-Cookie", "redirect=domain.example; Path=/"),
        ("X-Domain", "Domain=instances.example.com"),
    ]
    assert workload_cookies(headers, COOKIE) == headers


@pytest.mark.parametrize(
    ("headers", "cross"),
    [
        ({}, False),  # no browser: curl, a script with a key
        ({"sec-fetch-site": "same-origin"}, False),
        ({"sec-fetch-site": "none"}, False),  # typed in the address bar, a bookmark
        ({"sec-fetch-site": "Same-Origin"}, False),
        ({"sec-fetch-site": "same-site"}, True),  # another instance of the domain
        ({"sec-fetch-site": "cross-site"}, True),
        # Sec-Fetch-Site wins over Origin when a browser sends both.
        ({"sec-fetch-site": "cross-site", "origin": ORIGIN}, True),
        ({"sec-fetch-site": "same-origin", "origin": "https://evil.example"}, False),
        ({"origin": ORIGIN}, False),
        ({"origin": ORIGIN.upper()}, False),
        ({"origin": ORIGIN + ":443"}, False),  # the scheme's own port written out
        ({"origin": ORIGIN.replace("https", "http")}, True),
        ({"origin": ORIGIN + ":8443"}, True),
        ({"origin": "https://nb-2--8888--t-a.instances.example.com"}, True),
        ({"origin": "https://evil.example"}, True),
        ({"origin": "null"}, True),  # a sandboxed frame, a file: page
        ({"origin": ORIGIN + ":notaport"}, True),
    ],
)
def test_which_requests_are_cross_site(headers: dict[str, str], cross: bool) -> None:
    assert is_cross_site(headers, ORIGIN) is cross


def test_an_origin_on_a_non_default_port_must_name_that_port() -> None:
    local = "http://nb-1--8888--t-a.instances.localhost:8080"
    assert not is_cross_site({"origin": local}, local)
    assert is_cross_site({"origin": "http://nb-1--8888--t-a.instances.localhost"}, local)


@pytest.mark.parametrize("method", ["GET", "HEAD", "OPTIONS", "get"])
def test_a_read_from_another_site_is_let_through(method: str) -> None:
    require_same_site_for_changes(method, {"sec-fetch-site": "cross-site"}, ORIGIN)


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE", "post"])
def test_a_change_from_another_site_is_refused(method: str) -> None:
    with pytest.raises(Forbidden, match="must come from the instance's own pages"):
        require_same_site_for_changes(method, {"sec-fetch-site": "cross-site"}, ORIGIN)
    require_same_site_for_changes(method, {"sec-fetch-site": "same-origin"}, ORIGIN)
    require_same_site_for_changes(method, {}, ORIGIN)  # no browser
