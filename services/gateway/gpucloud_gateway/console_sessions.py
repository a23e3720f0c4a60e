"""The web console's sign-in: a server-side session behind an HttpOnly cookie.

- The cookie holds a random session id; the database holds only its SHA-256, so
  whoever reads the collection can sign in as nobody.
- A session acts as the user or API key it was opened with, read back on every
  request like a token's source (authentication.py): revoking the key, disabling
  the user or deleting the tenant ends it.
- Sign-out deletes the document: the cookie is dead at once, on every replica.
- CSRF: the cookie is `SameSite=Strict`, and a request that changes state must
  carry `X-CSRF-Token`, an HMAC of the session id that only the console's own
  pages learn (from the sign-in answer or `GET /v1/console/session`). A browser
  that says the request came from another site (`Sec-Fetch-Site`, else `Origin`)
  is refused as well.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import timedelta
from typing import Literal

from fastapi import Request, Response

from gpucloud_libs.clock import aware, now
from gpucloud_libs.errors import Forbidden, Unauthenticated
from gpucloud_libs.identity import secrets_equal

from .authentication import Authenticator
from .credentials import KEY_PREFIX
from .documents import ConsoleSessionDoc, UserDoc
from .instance_cookies import SAFE_METHODS, is_cross_site
from .schemas import ALL_SCOPES, ConsoleSession, ConsoleSignIn, Principal
from .sessions import Sessions
from .settings import GatewaySettings
from .store import ConsoleSessionStore

CSRF_HEADER = "x-csrf-token"


def _hash(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


class ConsoleSessions:
    def __init__(
        self,
        settings: GatewaySettings,
        store: ConsoleSessionStore,
        authenticator: Authenticator,
        sessions: Sessions,
    ) -> None:
        self._settings = settings
        self._store = store
        self._authenticator = authenticator
        self._sessions = sessions
        self._csrf_key = hmac.new(
            settings.session_secret.get_secret_value().encode(),
            b"gpucloud console csrf v1",
            hashlib.sha256,
        ).digest()
        secure = settings.console_cookie_secure
        #: `__Host-` needs Secure; a plain-http deployment (a demo) gets the bare name.
        self.cookie_name = ("__Host-" if secure else "") + settings.console_cookie_name

    def _csrf_token(self, session_id: str) -> str:
        return hmac.new(self._csrf_key, session_id.encode(), hashlib.sha256).hexdigest()

    async def open_for_user(
        self, user: UserDoc, response: Response, *, sso: bool = False
    ) -> ConsoleSession:
        """A session of a user who proved who they are (a password, or single sign-on)."""
        principal = await self._authenticator.from_source(
            "user", user["_id"], list(ALL_SCOPES), via="console",
            version=user.get("credentials_version", 0), sso=sso,
        )  # fmt: skip
        return await self._open("user", user["_id"], principal, response)

    async def sign_in(
        self, body: ConsoleSignIn, response: Response, connection: Request
    ) -> ConsoleSession:
        if body.api_key is not None:
            presented = body.api_key.get_secret_value()
            if not presented.startswith(KEY_PREFIX):
                raise Unauthenticated("an API key reads gpc_…; tokens cannot open a session")
            principal = await self._authenticator.authenticate(presented)
            if principal.service_ids is not None:
                raise Forbidden("a machine key of inference services cannot use the console")
            assert principal.key_id is not None  # an API key always has its id
            return await self._open("key", principal.key_id, principal, response)
        assert body.email is not None  # the schema's rule: both, or an API key
        assert body.password is not None
        user = await self._sessions.signed_in_user(body.email, body.password, connection)
        return await self.open_for_user(user, response)

    async def _open(
        self, source: Literal["user", "key"], source_id: str, principal: Principal,
        response: Response,
    ) -> ConsoleSession:  # fmt: skip
        session_id = secrets.token_urlsafe(32)
        started = now()
        document: ConsoleSessionDoc = {
            "_id": _hash(session_id),
            "source": source,
            "source_id": source_id,
            "source_version": principal.source_version,
            "sso": principal.sso,
            "tenant_id": principal.tenant_id,
            "created_at": started,
            "expires_at": started + timedelta(seconds=self._settings.console_session_ttl_s),
        }
        await self._store.insert(document)
        response.set_cookie(
            self.cookie_name,
            session_id,
            max_age=self._settings.console_session_ttl_s,
            path="/",
            secure=self._settings.console_cookie_secure,
            httponly=True,
            samesite="strict",
        )
        return self._view(session_id, document, principal.model_copy(update={"via": "console"}))

    async def current(self, request: Request) -> ConsoleSession:
        session_id = self._session_id(request)
        document = await self._live(session_id)
        return self._view(session_id, document, await self._principal(document))

    async def sign_out(self, request: Request, response: Response) -> None:
        """Ends the session for good; a missing or dead cookie is already signed out."""
        session_id = request.cookies.get(self.cookie_name)
        if session_id:
            self._check_csrf(request, session_id)
            await self._store.delete(_hash(session_id))
        response.delete_cookie(
            self.cookie_name,
            path="/",
            secure=self._settings.console_cookie_secure,
            httponly=True,
            samesite="strict",
        )

    def presented(self, request: Request) -> bool:
        return self.cookie_name in request.cookies

    async def authenticate(self, request: Request) -> Principal:
        """The caller behind the console cookie; a change must carry the CSRF token."""
        session_id = self._session_id(request)
        if request.method.upper() not in SAFE_METHODS:
            self._check_csrf(request, session_id)
        return await self._principal(await self._live(session_id))

    async def sweep_expired(self) -> None:
        await self._store.delete_expired(now())

    def _session_id(self, request: Request) -> str:
        session_id = request.cookies.get(self.cookie_name)
        if not session_id:
            raise Unauthenticated("sign in to the console first")
        return session_id

    async def _live(self, session_id: str) -> ConsoleSessionDoc:
        document = await self._store.get(_hash(session_id))
        if document is None:
            raise Unauthenticated("the console session has ended; sign in again")
        if aware(document["expires_at"]) <= now():
            await self._store.delete(document["_id"])
            raise Unauthenticated("the console session has expired; sign in again")
        return document

    async def _principal(self, document: ConsoleSessionDoc) -> Principal:
        return await self._authenticator.from_source(
            document["source"], document["source_id"], list(ALL_SCOPES), via="console",
            version=document.get("source_version", 0), sso=document.get("sso", False),
        )  # fmt: skip

    def _console_origin(self, request: Request) -> str:
        """The console's origin as the browser sees it: behind an ingress that ends TLS
        the request here is http, but the pages were https."""
        scheme = "https" if self._settings.served_over_tls else request.url.scheme
        return f"{scheme}://{request.headers.get('host', '')}"

    def _check_csrf(self, request: Request, session_id: str) -> None:
        if is_cross_site(request.headers, self._console_origin(request)):
            raise Forbidden("a console request that changes state must come from the console")
        presented = request.headers.get(CSRF_HEADER, "")
        if not secrets_equal(presented, self._csrf_token(session_id)):
            raise Forbidden(
                "a console request that changes state needs the session's X-CSRF-Token header"
            )

    def _view(
        self, session_id: str, document: ConsoleSessionDoc, principal: Principal
    ) -> ConsoleSession:
        return ConsoleSession(
            csrf_token=self._csrf_token(session_id),
            expires_at=aware(document["expires_at"]),
            principal=principal,
        )
