"""Single sign-on with OpenID Connect, per tenant: a tenant admin names the provider
(checked by discovery); the console signs in with the authorization code and PKCE,
the CLI with the device authorization grant; the provider's groups map to the
user's role (sso_accounts.py says which user an ID token names).

The gateway is the relying party, and a confidential client: the client secret,
sealed at rest, never reaches a browser or a CLI. A browser's sign-in lives
server-side for ten minutes, works once, and is bound to the browser that began it
by a cookie (its state alone would let an attacker sign a victim in as the
attacker). A CLI's sign-in is held by a poll token only that CLI has.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import secrets
from dataclasses import dataclass
from datetime import timedelta

from gpucloud_libs.clock import aware, now
from gpucloud_libs.errors import BadRequest, Forbidden, Gone, NotFound, ValidationFailed
from gpucloud_libs.sealing import SecretBox

from .credentials import hash_secret
from .documents import SsoConfigDoc, SsoDeviceDoc, SsoLoginDoc, UserDoc
from .oidc import (
    REFUSED,
    DevicePending,
    OidcClient,
    Provider,
    ProviderUnreachable,
    SignInRefused,
    authorization_url,
    pkce_pair,
)
from .schemas import Principal
from .settings import GatewaySettings
from .sso_accounts import SsoAccounts
from .sso_schemas import SsoConfig, SsoConfigSet, SsoDeviceStarted
from .sso_store import SsoStore

log = logging.getLogger(__name__)

CALLBACK_PATH = "/v1/sso/callback"
SIGN_IN_TTL = timedelta(minutes=10)


@dataclass(frozen=True)
class BrowserSignIn:
    """Where the browser goes next, and the secret its cookie keeps until it is back."""

    provider_url: str
    browser_secret: str


class SingleSignOn:
    def __init__(
        self, settings: GatewaySettings, store: SsoStore, oidc: OidcClient, accounts: SsoAccounts
    ) -> None:
        self._public_url = (settings.public_url or "").rstrip("/")
        self.cookie_secure = settings.console_cookie_secure
        #: The cookie binding a browser's sign-in to it; `__Host-` needs Secure.
        self.cookie_name = ("__Host-" if self.cookie_secure else "") + "gpucloud_sso"
        self._store = store
        self._oidc = oidc
        self._accounts = accounts
        key = hmac.new(
            settings.session_secret.get_secret_value().encode(),
            b"gpucloud sso client secrets v1", hashlib.sha256,
        ).digest()  # fmt: skip
        self._box = SecretBox(
            base64.urlsafe_b64encode(key).decode(), setting="GPUCLOUD_SESSION_SECRET"
        )

    @property
    def redirect_uri(self) -> str:
        """Made from the configured public address, never from a request's Host (a
        TLS-ending ingress would make it http, a forged Host anything)."""
        return f"{self._public_url}{CALLBACK_PATH}"

    # --- the tenant admin's configuration ---------------------------------------------

    async def configure(self, principal: Principal, body: SsoConfigSet) -> SsoConfig:
        assert principal.tenant_id is not None
        if not self._public_url:
            raise ValidationFailed(
                "single sign-on needs the platform's public address, which the operator "
                "has not set (GPUCLOUD_PUBLIC_URL)"
            )
        group_projects = {
            group: list(await self._accounts.memberships.check_named(principal.tenant_id, ids))
            for group, ids in body.group_projects.items()
        }
        await self._oidc.check_issuer(body.issuer)
        provider = await self._oidc.discover(body.issuer, fresh=True)  # a 422 if it does not answer
        doc: SsoConfigDoc = {
            "_id": principal.tenant_id, "issuer": provider.issuer, "client_id": body.client_id,
            "client_secret_sealed": self._box.seal(body.client_secret.get_secret_value()),
            "group_roles": dict(body.group_roles), "group_projects": group_projects,
            "default_role": body.default_role,
            "create_users": body.create_users, "cli_sign_in": body.cli_sign_in,
            "password_sign_in": body.password_sign_in, "updated_at": now(),
        }  # fmt: skip
        await self._store.put(doc)
        return self._view(doc)

    async def config(self, principal: Principal) -> SsoConfig:
        assert principal.tenant_id is not None
        return self._view(await self._config(principal.tenant_id))

    async def remove(self, principal: Principal) -> None:
        assert principal.tenant_id is not None
        if not await self._store.delete(principal.tenant_id):
            raise NotFound("single sign-on is not set up for your tenant")

    async def _config(self, tenant_id: str) -> SsoConfigDoc:
        config = await self._store.config(tenant_id)
        if config is None or not await self._accounts.tenant_active(tenant_id):
            raise NotFound(f"tenant {tenant_id!r} has no single sign-on")
        return config

    def _view(self, doc: SsoConfigDoc) -> SsoConfig:
        return SsoConfig(
            tenant_id=doc["_id"], issuer=doc["issuer"], client_id=doc["client_id"],
            group_roles=doc["group_roles"], group_projects=doc.get("group_projects") or {},
            default_role=doc["default_role"],
            create_users=doc["create_users"], cli_sign_in=doc["cli_sign_in"],
            password_sign_in=doc.get("password_sign_in", True), redirect_uri=self.redirect_uri,
        )  # fmt: skip

    def _client_secret(self, config: SsoConfigDoc) -> str:
        secret = self._box.open(config["client_secret_sealed"])
        if secret is None:
            raise SignInRefused("the client secret no longer opens (the session secret changed)")
        return secret

    async def sweep_expired(self) -> None:
        """Sign-ins begun and never finished."""
        await self._store.delete_expired(now())

    # --- a browser's sign-in ----------------------------------------------------------

    async def start(self, tenant_id: str, invitation_id: str | None = None) -> BrowserSignIn:
        """Where the browser goes to sign in at the tenant's provider (to accept the
        invitation `invitation_id`, if given)."""
        config = await self._config(tenant_id)
        provider = await self._oidc.discover(config["issuer"])
        state, nonce = secrets.token_urlsafe(32), secrets.token_urlsafe(16)
        browser_secret = secrets.token_urlsafe(32)
        verifier, challenge = pkce_pair()
        login = SsoLoginDoc(
            _id=hash_secret(state), tenant_id=tenant_id, browser_hash=hash_secret(browser_secret),
            verifier=verifier, nonce=nonce, redirect_uri=self.redirect_uri,
            expires_at=now() + SIGN_IN_TTL,
        )  # fmt: skip
        if invitation_id is not None:
            login["invitation_id"] = invitation_id
        await self._store.begin(login)
        url = authorization_url(
            provider, client_id=config["client_id"], redirect_uri=self.redirect_uri, state=state,
            nonce=nonce, challenge=challenge,
        )  # fmt: skip
        return BrowserSignIn(url, browser_secret)

    async def finish(
        self, state: str, code: str | None, error: str | None, browser_secret: str | None
    ) -> UserDoc:
        """The user the provider vouched for, in the tenant the sign-in began for."""
        login = await self._store.take(hash_secret(state))
        if login is None or aware(login["expires_at"]) <= now():
            raise BadRequest("this sign-in expired or was already used; start again")
        if browser_secret is None or not hmac.compare_digest(
            hash_secret(browser_secret), login["browser_hash"]
        ):
            raise BadRequest("this sign-in began in another browser; start again here")
        if error is not None or code is None:
            log.info("the provider refused a sign-in", extra={"tenant_id": login["tenant_id"]})
            raise Forbidden(REFUSED)
        try:
            config, provider = await self._provider_of(login["tenant_id"])
            id_token = await self._oidc.exchange(
                provider, client_id=config["client_id"], client_secret=self._client_secret(config),
                code=code, redirect_uri=login["redirect_uri"], verifier=login["verifier"],
            )  # fmt: skip
            claims = await self._oidc.claims(
                provider, id_token, client_id=config["client_id"], nonce=login["nonce"]
            )
            return await self._accounts.user_of(config, claims, login.get("invitation_id"))
        except (SignInRefused, ValidationFailed) as refused:
            raise _refused(login["tenant_id"], refused) from None

    async def _provider_of(self, tenant_id: str) -> tuple[SsoConfigDoc, Provider]:
        """The configuration and provider a sign-in under way finishes with."""
        config = await self._store.config(tenant_id)
        if config is None:
            raise SignInRefused("single sign-on was removed during the sign-in")
        return config, await self._oidc.discover(config["issuer"])

    # --- a CLI's sign-in (device authorization) ---------------------------------------

    async def start_device(
        self, tenant_id: str, invitation_id: str | None = None
    ) -> SsoDeviceStarted:
        """A code for the user to enter at the provider, and the token the CLI polls
        with (to accept the invitation `invitation_id`, if given)."""
        config = await self._config(tenant_id)
        if not config["cli_sign_in"]:
            raise Forbidden(
                "this tenant's single sign-on is for the console only; its admin may allow "
                "the CLI (gpucloud sso set --cli)"
            )
        try:
            provider = await self._oidc.discover(config["issuer"])
            started = await self._oidc.authorize_device(
                provider, client_id=config["client_id"], client_secret=self._client_secret(config)
            )
        except (SignInRefused, ValidationFailed) as refused:
            raise _refused(tenant_id, refused) from None
        poll_token = secrets.token_urlsafe(32)
        at = now()
        device: SsoDeviceDoc = {
            "_id": hash_secret(poll_token), "tenant_id": tenant_id,
            "device_code_sealed": self._box.seal(started.device_code),
            "interval_s": started.interval, "next_poll_at": at,
            "expires_at": at + timedelta(seconds=started.expires_in),
        }  # fmt: skip
        if invitation_id is not None:
            device["invitation_id"] = invitation_id
        await self._store.begin_device(device)
        return SsoDeviceStarted(
            user_code=started.user_code, verification_uri=started.verification_uri,
            verification_uri_complete=started.verification_uri_complete,
            expires_in=started.expires_in, interval=started.interval, poll_token=poll_token,
        )  # fmt: skip

    async def poll_device(self, poll_token: str) -> UserDoc | int:
        """The user, once they approved at the provider; until then the seconds to
        wait before polling again."""
        poll_hash = hash_secret(poll_token)
        device = await self._store.device(poll_hash)
        at = now()
        if device is None or aware(device["expires_at"]) <= at:
            raise Gone("this sign-in expired or was already used; start again")
        interval = device["interval_s"]
        if not await self._store.claim_device_poll(poll_hash, at, at + timedelta(seconds=interval)):
            return interval  # polled too soon: the provider is not asked
        try:
            config, provider = await self._provider_of(device["tenant_id"])
            device_code = self._box.open(device["device_code_sealed"])
            if device_code is None:
                raise SignInRefused("the device code no longer opens (the session secret changed)")
            id_token = await self._oidc.poll_device(
                provider, client_id=config["client_id"], client_secret=self._client_secret(config),
                device_code=device_code,
            )  # fmt: skip
            claims = await self._oidc.claims(
                provider, id_token, client_id=config["client_id"], nonce=None
            )
            user = await self._accounts.user_of(config, claims, device.get("invitation_id"))
        except ProviderUnreachable as unreachable:  # a blip: the CLI polls again
            log.info("a provider did not answer a poll", extra={"why": str(unreachable)})
            return interval
        except DevicePending as pending:
            if pending.slow_down:  # RFC 8628 3.5: five seconds more, from now on
                interval += 5
                await self._store.slow_device(poll_hash, at + timedelta(seconds=interval), interval)
            return interval
        except (SignInRefused, ValidationFailed) as refused:
            await self._store.end_device(poll_hash)
            raise _refused(device["tenant_id"], refused) from None
        if not await self._store.end_device(poll_hash):
            raise Gone("this sign-in was already used; start again")
        return user


def _refused(tenant_id: str, why: Exception) -> Forbidden:
    log.warning("a sign-in was refused", extra={"tenant_id": tenant_id, "why": str(why)})
    return Forbidden(REFUSED)
