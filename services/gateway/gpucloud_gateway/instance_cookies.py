"""The instance session cookie, and what keeps it to its one host.

Every tenant's instances share the instance domain, so the browser must not let
one instance's pages act on another's, or on the same instance by stealth:
- Over https the cookie is `__Host-<name>`: Secure, Path=/ and host-only, so no
  other host of the domain can set or shadow it.
- A workload's own `Set-Cookie` may not name a `Domain` (it would reach every
  instance host, other tenants' too) nor the gateway's cookie: such headers are
  dropped on the way out.
- A cookie-authenticated request that changes state must come from the
  instance's own pages (`Sec-Fetch-Site`, else `Origin`).
- Only a one-minute link token, minted for `link:<host>`, opens a session: a
  cookie (audience `<host>`) cannot be swapped for a fresh one, forever.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit

from gpucloud_libs.errors import Forbidden

from .settings import GatewaySettings
from .upstream import Headers

LINK_AUDIENCE_PREFIX = "link:"
#: Methods a browser sends cross-site without asking: they must not change state.
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: What `Sec-Fetch-Site` says of a request the user made on the instance's own pages.
_SAME_SITE_FETCHES = frozenset({"same-origin", "none"})
_DEFAULT_PORTS = {"https": 443, "http": 80}


def session_cookie_name(settings: GatewaySettings) -> str:
    """`__Host-` needs Secure; a plain-http deployment (a demo) gets the bare name."""
    prefix = "__Host-" if settings.instance_cookie_secure else ""
    return prefix + settings.instance_cookie_name


def link_audience(host: str) -> str:
    return LINK_AUDIENCE_PREFIX + host


def _cookie_name(set_cookie: str) -> str:
    return set_cookie.partition("=")[0].strip()


def _names_a_domain(set_cookie: str) -> bool:
    attributes = set_cookie.split(";")[1:]
    return any(part.strip().lower().startswith("domain") for part in attributes)


def without_session_cookie(header: str, cookie_name: str) -> str:
    """A request's Cookie header minus the gateway's own cookie, for the workload."""
    kept = [part for part in header.split(";") if _cookie_name(part) != cookie_name]
    return ";".join(kept).strip()


def workload_cookies(headers: Headers, cookie_name: str) -> Headers:
    """A workload's response headers without the cookies it may not set."""
    bare = cookie_name.removeprefix("__Host-")
    return [
        (name, value)
        for name, value in headers
        if name.lower() != "set-cookie"
        or (not _names_a_domain(value) and _cookie_name(value) not in {cookie_name, bare})
    ]


def _origin_parts(origin: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) of an origin, the scheme's own port written out."""
    parts = urlsplit(origin.strip().lower())
    try:
        port = parts.port or _DEFAULT_PORTS.get(parts.scheme)
    except ValueError:  # a port that is no number
        return ("", "", None)
    return (parts.scheme, parts.hostname or "", port)


def is_cross_site(headers: Mapping[str, str], origin: str) -> bool:
    """Whether the browser says the request came from pages other than `origin`'s
    (`scheme://host[:port]`). A client that is no browser sends neither header and is
    not cross-site. Without `Sec-Fetch-Site`, the `Origin` must be the same scheme, host
    and port (review L12): http://host or host:other-port is another origin."""
    fetch_site = headers.get("sec-fetch-site")
    if fetch_site is not None:
        return fetch_site.lower() not in _SAME_SITE_FETCHES
    sent = headers.get("origin")
    if sent is None:
        return False
    return _origin_parts(sent) != _origin_parts(origin)


def require_same_site_for_changes(method: str, headers: Mapping[str, str], origin: str) -> None:
    """Refuse a cookie-authenticated change made from another origin's pages (CSRF)."""
    if method.upper() not in SAFE_METHODS and is_cross_site(headers, origin):
        raise Forbidden(
            "a request that changes state with the session cookie must come from the "
            "instance's own pages; other clients send `Authorization: Bearer <key>`"
        )
