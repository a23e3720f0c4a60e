"""Headers on every answer of the gateway's own (the API and the console), not on
what an instance's workload answers through it.

- `Cache-Control: no-store` on API answers that do not set their own: new API keys,
  accessor secrets, session and CSRF tokens must not stay in a browser's or a
  proxy's cache, and no API answer is worth caching.
- `X-Frame-Options: DENY` beside the console's `frame-ancestors 'none'`, for
  browsers that read only the older header.
- `Strict-Transport-Security` where the gateway is served over TLS.
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: Two years, subdomains included: instance hosts are subdomains of the gateway's.
HSTS = "max-age=63072000; includeSubDomains"


class SecurityHeaders:
    def __init__(self, app: ASGIApp, *, served_over_tls: bool) -> None:
        self.app = app
        self.served_over_tls = served_over_tls

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        is_api = scope["path"].startswith("/v1/")
        over_tls = self.served_over_tls or scope.get("scheme") == "https"

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers.setdefault("x-frame-options", "DENY")
                headers.setdefault("x-content-type-options", "nosniff")
                if is_api:
                    headers.setdefault("cache-control", "no-store")
                if over_tls:
                    headers.setdefault("strict-transport-security", HSTS)
            await send(message)

        await self.app(scope, receive, with_headers)
