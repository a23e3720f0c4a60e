"""Short-lived tokens: from a password sign-in or an API key, and instance session cookies.

A token is HMAC-signed, bound to an audience, and dies with the key or user
it was minted from.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

from pydantic import SecretStr
from starlette.requests import HTTPConnection

from gpucloud_libs.errors import Unauthenticated

from . import credentials
from .address_guard import address_key, client_address
from .authentication import Authenticator
from .credentials import API_AUDIENCE, SessionToken
from .documents import UserDoc
from .ratelimit import RateLimiter
from .schemas import ALL_SCOPES, Principal, TokenIssued, TokenRequest
from .settings import GatewaySettings
from .sso_store import SsoStore
from .store import UserStore


class Sessions:
    def __init__(
        self,
        settings: GatewaySettings,
        users: UserStore,
        authenticator: Authenticator,
        limiter: RateLimiter,
        sso: SsoStore,
    ) -> None:
        self._users = users
        self._sso = sso
        self._authenticator = authenticator
        self._limiter = limiter
        self._session_secret = settings.session_secret.get_secret_value()
        self._trusted_proxies = settings.trusted_proxies
        self._sign_ins_per_s = settings.sign_ins_per_address_per_s
        self._sign_ins_burst = settings.sign_ins_per_address_burst

    async def issue(
        self, request: TokenRequest, principal: Principal | None, connection: HTTPConnection
    ) -> TokenIssued:
        if request.email is not None and request.password is not None:
            user = await self.signed_in_user(request.email, request.password, connection)
            return self.user_token(user, request.ttl_s)
        if principal is not None and principal.via == "api_key" and principal.key_id:
            return self._issued(
                self.session_claims(principal, audience=API_AUDIENCE, ttl_s=request.ttl_s)
            )
        raise Unauthenticated("send an email and password, or exchange an API key sent as a bearer")

    def user_token(self, user: UserDoc, ttl_s: float, *, sso: bool = False) -> TokenIssued:
        """A token of a user who proved who they are (a password, or single sign-on)."""
        claims = SessionToken(
            source="user", source_id=user["_id"], source_version=user.get("credentials_version", 0),
            role=user["role"], tenant_id=user["tenant_id"], scopes=list(ALL_SCOPES),
            audience=API_AUDIENCE, expires_at=time.time() + ttl_s, sso=sso,
        )  # fmt: skip
        return self._issued(claims)

    def _issued(self, claims: SessionToken) -> TokenIssued:
        return TokenIssued(
            token=credentials.issue_token(self._session_secret, claims),
            expires_at=datetime.fromtimestamp(claims.expires_at, UTC),
        )

    async def signed_in_user(
        self, email: str, password: SecretStr, connection: HTTPConnection
    ) -> UserDoc:
        """The active user with this email and password; rate-limited per client address
        (before the scrypt it costs, review M8), then per email."""
        self.limit_sign_ins(connection)
        self._limiter.take(f"login:{email}", rate=0.2, burst=10, what="signing in as this user")
        user = await self._users.by_email(email)
        matched = await asyncio.to_thread(
            credentials.sign_in_matches,
            password.get_secret_value(),
            user["password_hash"] if user else None,
        )
        if user is None or not matched:
            raise Unauthenticated("the email or password is wrong")
        if user["status"] != "active":
            raise Unauthenticated("the user is disabled")
        await self._authenticator.check_tenant(user["tenant_id"])
        config = await self._sso.config(user["tenant_id"]) if user["tenant_id"] else None
        if config is not None and not config.get("password_sign_in", True):
            raise Unauthenticated(
                "your tenant signs in through its identity provider alone: use single "
                f"sign-on (`gpucloud login --sso {user['tenant_id']}`)"
            )
        return user

    def limit_sign_ins(self, connection: HTTPConnection) -> None:
        """Sign-ins from one client address (a password's scrypt, a single sign-on's
        calls to the provider) are rate-limited before any of that work (review M8)."""
        address = address_key(client_address(connection, self._trusted_proxies))
        self._limiter.take(
            f"sign-in:{address}",
            rate=self._sign_ins_per_s,
            burst=self._sign_ins_burst,
            what="signing in from this address",
        )

    def session_claims(self, principal: Principal, *, audience: str, ttl_s: float) -> SessionToken:
        """A token acting as `principal`, tied to the credential it was minted from."""
        source, source_id = (
            ("key", principal.key_id) if principal.key_id else ("user", principal.user_id)
        )
        if source_id is None:
            raise Unauthenticated("this credential cannot mint tokens")
        return SessionToken(
            source=source, source_id=source_id, source_version=principal.source_version,
            role=principal.role, tenant_id=principal.tenant_id,
            scopes=principal.scopes, audience=audience, expires_at=time.time() + ttl_s,
            sso=principal.sso,
        )  # fmt: skip

    def sign_session(self, claims: SessionToken) -> str:
        return credentials.issue_token(self._session_secret, claims)
