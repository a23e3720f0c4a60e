"""Single sign-on with OpenID Connect, per tenant: a tenant admin names the provider
(checked by discovery), the console signs in with the authorization code and PKCE,
and the provider's groups map to the user's role; a first sign-in makes the user
when the tenant allows it.

The gateway is the relying party, and a confidential client: the client secret,
sealed at rest, never reaches a browser. A sign-in's state, nonce and code verifier
live server-side for ten minutes, and its state works once.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import secrets
from datetime import timedelta
from typing import Any

from gpucloud_libs.clock import aware, now
from gpucloud_libs.errors import BadRequest, Forbidden, NotFound, ValidationFailed
from gpucloud_libs.sealing import SecretBox

from .documents import SsoConfigDoc, SsoLoginDoc, UserDoc
from .oidc import REFUSED, OidcClient, SignInRefused, authorization_url, pkce_pair
from .schemas import Principal, SsoConfig, SsoConfigSet, UserCreate
from .settings import GatewaySettings
from .store import SsoStore, UserStore
from .users import Users

log = logging.getLogger(__name__)

CALLBACK_PATH = "/v1/sso/callback"
SIGN_IN_TTL = timedelta(minutes=10)
#: A user's groups give them the highest of these their mapping names.
ROLE_RANK = {"tenant-user": 1, "tenant-admin": 2}


def _state_hash(state: str) -> str:
    return hashlib.sha256(state.encode()).hexdigest()


class SingleSignOn:
    def __init__(
        self, settings: GatewaySettings, store: SsoStore, oidc: OidcClient, users: Users,
        user_store: UserStore,
    ) -> None:  # fmt: skip
        self._settings = settings
        self._store = store
        self._oidc = oidc
        self._users = users
        self._user_store = user_store
        key = hmac.new(
            settings.session_secret.get_secret_value().encode(),
            b"gpucloud sso client secrets v1", hashlib.sha256,
        ).digest()  # fmt: skip
        self._box = SecretBox(
            base64.urlsafe_b64encode(key).decode(), setting="GPUCLOUD_SESSION_SECRET"
        )

    # --- the tenant admin's configuration ---------------------------------------------

    async def configure(self, principal: Principal, body: SsoConfigSet, base_url: str) -> SsoConfig:
        assert principal.tenant_id is not None
        if not body.issuer.startswith("https://") and not self._settings.egress.loopback_only:
            raise ValidationFailed("the issuer must be an https:// URL", field="issuer")
        await self._oidc.discover(body.issuer)  # a 422 when it does not answer
        doc: SsoConfigDoc = {
            "_id": principal.tenant_id, "issuer": body.issuer.rstrip("/"),
            "client_id": body.client_id,
            "client_secret_sealed": self._box.seal(body.client_secret.get_secret_value()),
            "group_roles": dict(body.group_roles), "default_role": body.default_role,
            "create_users": body.create_users, "updated_at": now(),
        }  # fmt: skip
        await self._store.put(doc)
        return _view(doc, base_url)

    async def config(self, principal: Principal, base_url: str) -> SsoConfig:
        assert principal.tenant_id is not None
        doc = await self._store.config(principal.tenant_id)
        if doc is None:
            raise NotFound("single sign-on is not set up for your tenant")
        return _view(doc, base_url)

    async def remove(self, principal: Principal) -> None:
        assert principal.tenant_id is not None
        if not await self._store.delete(principal.tenant_id):
            raise NotFound("single sign-on is not set up for your tenant")

    # --- a sign-in ------------------------------------------------------------------

    async def sweep_expired(self) -> None:
        """Sign-ins begun and never finished."""
        await self._store.delete_expired(now())

    async def start(self, tenant_id: str, base_url: str) -> str:
        """Where the browser goes to sign in at the tenant's provider."""
        config = await self._store.config(tenant_id)
        if config is None:
            raise NotFound(f"tenant {tenant_id!r} has no single sign-on")
        provider = await self._oidc.discover(config["issuer"])
        state, nonce = secrets.token_urlsafe(32), secrets.token_urlsafe(16)
        verifier, challenge = pkce_pair()
        redirect_uri = f"{base_url.rstrip('/')}{CALLBACK_PATH}"
        await self._store.begin(SsoLoginDoc(
            _id=_state_hash(state), tenant_id=tenant_id, verifier=verifier, nonce=nonce,
            redirect_uri=redirect_uri, expires_at=now() + SIGN_IN_TTL,
        ))  # fmt: skip
        return authorization_url(
            provider, client_id=config["client_id"], redirect_uri=redirect_uri, state=state,
            nonce=nonce, challenge=challenge,
        )  # fmt: skip

    async def finish(self, state: str, code: str | None, error: str | None) -> UserDoc:
        """The user the provider vouched for, in the tenant the sign-in began for."""
        login = await self._store.take(_state_hash(state))
        if login is None or aware(login["expires_at"]) <= now():
            raise BadRequest("this sign-in expired or was already used; start again")
        if error is not None or code is None:
            log.info(
                "the provider refused a sign-in",
                extra={"tenant_id": login["tenant_id"], "error": error},
            )
            raise Forbidden(REFUSED)
        config = await self._store.config(login["tenant_id"])
        try:
            if config is None:
                raise SignInRefused("single sign-on was removed during the sign-in")
            claims = await self._claims(config, login, code)
            return await self._user_of(config, claims)
        except SignInRefused as refused:
            log.warning(
                "a sign-in was refused",
                extra={"tenant_id": login["tenant_id"], "why": str(refused)},
            )
            raise Forbidden(REFUSED) from None

    async def _claims(self, config: SsoConfigDoc, login: SsoLoginDoc, code: str) -> dict[str, Any]:
        provider = await self._oidc.discover(config["issuer"])
        secret = self._box.open(config["client_secret_sealed"])
        if secret is None:
            raise SignInRefused("the client secret no longer opens (the session secret changed)")
        id_token = await self._oidc.exchange(
            provider, client_id=config["client_id"], client_secret=secret, code=code,
            redirect_uri=login["redirect_uri"], verifier=login["verifier"],
        )  # fmt: skip
        return await self._oidc.claims(
            provider, id_token, client_id=config["client_id"], nonce=login["nonce"]
        )

    async def _user_of(self, config: SsoConfigDoc, claims: dict[str, Any]) -> UserDoc:
        email = str(claims.get("email") or "").lower()
        if not email or claims.get("email_verified") is False:
            raise SignInRefused("the ID token has no verified email")
        roles = [
            config["group_roles"][g]
            for g in claims.get("groups") or []
            if g in config["group_roles"]
        ]
        role = max(roles, key=ROLE_RANK.__getitem__) if roles else config["default_role"]
        if role is None:
            raise SignInRefused(f"no group of {email} has a role in the tenant")
        user = await self._user_store.by_email(email)
        if user is None:
            if not config["create_users"]:
                raise SignInRefused(f"{email} is not a user and the tenant makes none")
            body = UserCreate(email=email, name=str(claims.get("name") or email), role=role)
            made = await self._users.insert(body, tenant_id=config["_id"])
            user = await self._user_store.get(made.user_id)
            assert user is not None
            return user
        if user.get("tenant_id") != config["_id"] or user["status"] != "active":
            raise SignInRefused(f"{email} is not an active user of the tenant")
        if user["role"] != role:
            user = await self._users.change_role(user, role)
        return user


def _view(doc: SsoConfigDoc, base_url: str) -> SsoConfig:
    return SsoConfig(
        tenant_id=doc["_id"], issuer=doc["issuer"], client_id=doc["client_id"],
        group_roles=doc["group_roles"], default_role=doc["default_role"],
        create_users=doc["create_users"], redirect_uri=f"{base_url.rstrip('/')}{CALLBACK_PATH}",
    )  # fmt: skip
