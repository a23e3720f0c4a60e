"""The one-minute link that opens an instance's URL in a browser.

`POST /v1/gpu-instances/{id}/ports/{port}/session` makes it; its `/_gpucloud/session`
path, on the instance's own host, swaps the link's token for a cookie bound to that one
host, so a cookie for one instance opens no other instance and not the API
(instance_cookies.py keeps the cookie to its host). A link is good once.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from urllib.parse import quote

from fastapi import Request, Response
from fastapi.responses import RedirectResponse

from gpucloud_libs.errors import NotFound, Unauthenticated
from gpucloud_libs.naming import instance_host, public_origin

from .authentication import Authenticator
from .instance_cookies import link_audience, session_cookie_name
from .instance_targets import InstanceTargets, require_connect
from .schemas import InstanceSession, Principal
from .sessions import Sessions
from .settings import GatewaySettings
from .store import SpentLinkStore

SESSION_PATH = "/_gpucloud/session"
#: The link that sets the cookie is good for this long.
SESSION_LINK_TTL_S = 60


class SessionLinks:
    def __init__(
        self,
        settings: GatewaySettings,
        authenticator: Authenticator,
        sessions: Sessions,
        targets: InstanceTargets,
        spent_links: SpentLinkStore,
    ) -> None:
        self.settings = settings
        self.authenticator = authenticator
        self.sessions = sessions
        self.targets = targets
        self.spent_links = spent_links
        self.cookie_name = session_cookie_name(settings)

    async def open(self, principal: Principal, instance_id: str, port: int) -> InstanceSession:
        tenant_id = principal.tenant_id
        if tenant_id is None or principal.service_ids is not None:
            raise NotFound(f"instance {instance_id!r} does not exist")
        require_connect(principal)
        await self.targets.instances_call(principal, f"/gpu-instances/{quote(instance_id)}")
        host = instance_host(instance_id, tenant_id, port, self.settings.instance_domain)
        claims = self.sessions.session_claims(
            principal, audience=link_audience(host), ttl_s=SESSION_LINK_TTL_S
        )
        token = self.sessions.sign_session(claims)
        return InstanceSession(
            url=public_origin(
                self.settings.instance_url_scheme, host, self.settings.instance_url_port
            )
            + f"{SESSION_PATH}?token={token}",
            expires_at=datetime.fromtimestamp(claims.expires_at, UTC),
        )

    async def start(self, request: Request, host: str) -> Response:
        """The link opened on its host: a cookie for that host, then where it points."""
        link = request.query_params.get("token")
        principal = await self.authenticator.authenticate_token(link, audience=link_audience(host))
        # Good once: the link sits in the URL, so in proxies' and ingress logs (review L9).
        assert link is not None  # authenticate_token refuses none
        digest = hashlib.sha256(link.encode()).hexdigest()
        expires = datetime.now(UTC) + timedelta(seconds=SESSION_LINK_TTL_S)
        if not await self.spent_links.spend(digest, expires):
            raise Unauthenticated(
                "this session link was already opened; ask for a new one (Open, or "
                "`gpucloud instances open`)"
            )
        claims = self.sessions.session_claims(
            principal, audience=host, ttl_s=self.settings.instance_session_ttl_s
        )
        target = request.query_params.get("next", "/")
        if not target.startswith("/") or target.startswith("//"):
            target = "/"  # never an open redirect
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(
            self.cookie_name,
            self.sessions.sign_session(claims),
            max_age=self.settings.instance_session_ttl_s,
            path="/",
            secure=self.settings.instance_cookie_secure,
            httponly=True,
            samesite="lax",
        )
        return response
