"""The OpenID Connect relying party's protocol: discovery, the authorization code with
PKCE, the device authorization grant, and the ID token's checks (signature from the
issuer's keys, issuer, audience, expiry, nonce).

A tenant admin names the issuer, so every dial (discovery, the token endpoint, the
keys) goes through the outbound guard: globally routable addresses only (or
loopback alone on the local stack), checked on the connection itself, and no
redirect followed. What a provider answered is logged by its shape, never quoted:
an error's text could carry the client's credentials.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import secrets
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

import aiohttp
import jwt

from gpucloud_libs.errors import ValidationFailed
from gpucloud_libs.outbound_guard import OutboundGuard

PROVIDER_TIMEOUT_S = 5.0
#: A provider's answers are small; a larger one is refused unread past this.
MAX_ANSWER_BYTES = 256 * 1024
#: Discovery documents and keys are reused this long (a key the token names but the
#: cached set lacks is fetched again at once: a rotation).
PROVIDER_CACHE_S = 600.0
#: RFC 8628's poll interval and a device code's life, as this gateway keeps them.
DEVICE_INTERVAL_S = (5, 60)
DEVICE_EXPIRY_S = (60, 1800)
#: Clocks of the provider and the gateway may differ this much (iat, exp, nbf).
CLOCK_LEEWAY_S = 60
#: What a refused sign-in says: the reason is logged, never shown (it would tell an
#: attacker which part was wrong).
REFUSED = "the sign-in was refused; ask your tenant's admin, or sign in another way"
DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"


class SignInRefused(Exception):
    """The provider or its answer failed a check; the message is for the log only."""


class ProviderUnreachable(SignInRefused):
    """The provider did not answer (a network blip, a timeout): a poll may try again."""


class DevicePending(Exception):
    """The user has not finished at the provider yet (`slow_down`: poll less often)."""

    def __init__(self, slow_down: bool) -> None:
        super().__init__("authorization pending")
        self.slow_down = slow_down


@dataclass(frozen=True)
class Provider:
    #: Exactly as the provider writes it: ID tokens' `iss` must be this string.
    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str
    device_authorization_endpoint: str | None = None


@dataclass(frozen=True)
class DeviceAuthorization:
    device_code: str
    user_code: str
    verification_uri: str
    verification_uri_complete: str | None
    expires_in: int
    interval: int


def pkce_pair() -> tuple[str, str]:
    """A code verifier and its S256 challenge (RFC 7636)."""
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode()).digest()
    return verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


SCOPES = "openid email profile groups"


def authorization_url(
    provider: Provider, *, client_id: str, redirect_uri: str, state: str, nonce: str,
    challenge: str,
) -> str:  # fmt: skip
    query = urlencode({
        "response_type": "code", "client_id": client_id, "redirect_uri": redirect_uri,
        "scope": SCOPES, "state": state, "nonce": nonce,
        "code_challenge": challenge, "code_challenge_method": "S256",
    })  # fmt: skip
    return f"{provider.authorization_endpoint}?{query}"


def client_auth(client_id: str, client_secret: str) -> dict[str, str]:
    """The header of a client's HTTP Basic credentials: each part form-encoded first
    (RFC 6749 2.3.1), so an id with `:` stays one id."""
    pair = f"{quote(client_id, safe='')}:{quote(client_secret, safe='')}"
    return {"Authorization": f"Basic {base64.b64encode(pair.encode()).decode()}"}


def same_issuer(named: str, written: str) -> bool:
    """The issuer a document names is the one asked for, a trailing `/` aside."""
    return named.rstrip("/") == written.rstrip("/")


class OidcClient:
    def __init__(self, guard: OutboundGuard, *, require_https: bool) -> None:
        self._guard = guard
        self._require_https = require_https
        self._session: aiohttp.ClientSession | None = None
        # Per replica: issuer -> (provider, until); keys URL -> (keys, until).
        self._providers: dict[str, tuple[Provider, float]] = {}
        self._keys: dict[str, tuple[jwt.PyJWKSet, float]] = {}

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = self._guard.session(PROVIDER_TIMEOUT_S)
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def check_issuer(self, issuer: str) -> None:
        """At save time: an https URL (http on the local stack) whose host resolves to
        addresses the platform may dial; a 422 otherwise."""
        if self._require_https and not issuer.startswith("https://"):
            raise ValidationFailed("the issuer must be an https:// URL", field="issuer")
        await self._guard.check(issuer)

    async def discover(self, issuer: str, *, fresh: bool = False) -> Provider:
        """The issuer's endpoints, from its discovery document (reused for ten
        minutes unless `fresh`); a 422 saying why when it does not answer one, or
        answers for another issuer."""
        cached = self._providers.get(issuer)
        if cached is not None and cached[1] > time.monotonic() and not fresh:
            return cached[0]
        url = f"{issuer.rstrip('/')}/.well-known/openid-configuration"
        try:
            async with self._http().get(url, allow_redirects=False) as answer:
                if answer.status != 200:
                    raise _unanswered(issuer, f"HTTP {answer.status}")
                document = await _json(answer)
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as error:
            raise _unanswered(issuer, type(error).__name__) from None
        if not isinstance(document, dict):
            raise _unanswered(issuer, "its document is not a JSON object")
        named = document.get("issuer")
        if not isinstance(named, str) or not same_issuer(named, issuer):
            raise _unanswered(issuer, "it names another issuer")
        endpoints = {}
        for field in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
            endpoints[field] = self._endpoint(issuer, document, field)
        device = document.get("device_authorization_endpoint")
        provider = Provider(
            issuer=named, **endpoints,
            device_authorization_endpoint=(
                self._endpoint(issuer, document, "device_authorization_endpoint")
                if device is not None else None
            ),
        )  # fmt: skip
        self._providers[issuer] = (provider, time.monotonic() + PROVIDER_CACHE_S)
        return provider

    def _endpoint(self, issuer: str, document: dict[str, Any], field: str) -> str:
        value = document.get(field)
        if not isinstance(value, str) or not value.startswith(("https://", "http://")):
            raise _unanswered(issuer, f"its document has no {field} URL")
        if self._require_https and not value.startswith("https://"):
            raise _unanswered(issuer, f"its {field} is not https")
        return value

    async def exchange(
        self, provider: Provider, *, client_id: str, client_secret: str, code: str,
        redirect_uri: str, verifier: str,
    ) -> str:  # fmt: skip
        """The ID token for an authorization code."""
        form = {"grant_type": "authorization_code", "code": code, "redirect_uri": redirect_uri,
                "code_verifier": verifier}  # fmt: skip
        status, body = await self._post(
            provider.token_endpoint, form, client_auth(client_id, client_secret)
        )
        if status != 200 or not isinstance(body.get("id_token"), str):
            raise SignInRefused(f"the token endpoint answered {status}: {_error_of(body)}")
        return str(body["id_token"])

    async def authorize_device(
        self, provider: Provider, *, client_id: str, client_secret: str
    ) -> DeviceAuthorization:
        """A device code and the user code to enter at the provider (RFC 8628)."""
        if provider.device_authorization_endpoint is None:
            raise SignInRefused("the provider offers no device authorization")
        # The client's credentials in the form (client_secret_post): providers read the
        # device request's client from its form (Dex keeps the secret from it for the
        # code exchange it makes for the device).
        form = {"client_id": client_id, "client_secret": client_secret, "scope": SCOPES}
        status, body = await self._post(provider.device_authorization_endpoint, form, None)
        try:
            return DeviceAuthorization(
                device_code=str(body["device_code"]), user_code=str(body["user_code"]),
                verification_uri=str(body["verification_uri"]),
                verification_uri_complete=(
                    str(body["verification_uri_complete"])
                    if body.get("verification_uri_complete") else None
                ),
                expires_in=_seconds(body.get("expires_in", 600), DEVICE_EXPIRY_S),
                interval=_seconds(body.get("interval", 5), DEVICE_INTERVAL_S),
            )  # fmt: skip
        except (KeyError, TypeError, ValueError):
            raise SignInRefused(
                f"the device authorization endpoint answered {status}: {_error_of(body)}"
            ) from None

    async def poll_device(
        self, provider: Provider, *, client_id: str, client_secret: str, device_code: str
    ) -> str:
        """The ID token once the user approved; DevicePending until then."""
        form = {"grant_type": DEVICE_GRANT, "device_code": device_code}
        status, body = await self._post(
            provider.token_endpoint, form, client_auth(client_id, client_secret)
        )
        error = body.get("error")
        if isinstance(error, str) and error in {"authorization_pending", "slow_down"}:
            raise DevicePending(slow_down=error == "slow_down")
        if status != 200 or not isinstance(body.get("id_token"), str):
            raise SignInRefused(f"the token endpoint answered {status}: {_error_of(body)}")
        return str(body["id_token"])

    async def _post(
        self, url: str, form: dict[str, str], headers: dict[str, str] | None
    ) -> tuple[int, dict[str, Any]]:
        try:
            async with self._http().post(
                url, data=form, headers=headers, allow_redirects=False
            ) as answer:
                status = answer.status
                body = await _json(answer)
        except (aiohttp.ClientError, OSError, TimeoutError) as error:
            # The type only: a client error's text may carry the request's headers.
            raise ProviderUnreachable(f"{url} did not answer ({type(error).__name__})") from None
        except ValueError:
            raise SignInRefused(f"{url} answered {status} with no JSON") from None
        return status, body if isinstance(body, dict) else {}

    async def claims(
        self, provider: Provider, id_token: str, *, client_id: str, nonce: str | None
    ) -> dict[str, Any]:
        """The ID token's claims, once its signature, issuer, audience, expiry and nonce
        hold."""
        try:
            kid = jwt.get_unverified_header(id_token).get("kid")
            key = await self._key(provider.jwks_uri, kid)
            claims: dict[str, Any] = jwt.decode(
                id_token, key=key.key, algorithms=["RS256", "ES256"], audience=client_id,
                issuer=provider.issuer, leeway=CLOCK_LEEWAY_S,
                options={"require": ["exp", "iat", "sub"]},
            )  # fmt: skip
        except (
            aiohttp.ClientError, OSError, TimeoutError, ValueError, TypeError, KeyError,
            AttributeError, jwt.PyJWTError,
        ) as error:  # fmt: skip
            raise SignInRefused(f"the ID token failed a check ({type(error).__name__})") from None
        if nonce is not None and claims.get("nonce") != nonce:
            raise SignInRefused("the ID token's nonce is not this sign-in's")
        return claims

    async def _key(self, jwks_uri: str, kid: str | None) -> jwt.PyJWK:
        """The issuer's key `kid` names (its only one when the token names none)."""
        cached = self._keys.get(jwks_uri)
        reusable = cached is not None and cached[1] > time.monotonic()
        for fetch in (False, True) if reusable else (True,):
            if fetch:
                async with self._http().get(jwks_uri, allow_redirects=False) as answer:
                    document = await _json(answer)
                keys = jwt.PyJWKSet.from_dict(document if isinstance(document, dict) else {})
                cached = (keys, time.monotonic() + PROVIDER_CACHE_S)
                self._keys[jwks_uri] = cached
            assert cached is not None
            found = [k for k in cached[0].keys if kid is None or k.key_id == kid]
            if found:
                return found[0]
        raise SignInRefused("the ID token names a key the issuer does not list")


async def _json(answer: aiohttp.ClientResponse) -> Any:
    """An answer's JSON, read no further than MAX_ANSWER_BYTES (ValueError past it)."""
    raw = await answer.content.read(MAX_ANSWER_BYTES + 1)
    if len(raw) > MAX_ANSWER_BYTES:
        raise ValueError("the answer is too large")
    return json.loads(raw)


def _seconds(value: Any, bounds: tuple[int, int]) -> int:
    """A provider's count of seconds, as an integer within `bounds` (ValueError when it
    is not a finite number)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise ValueError("not a number of seconds")
    low, high = bounds
    return int(min(max(value, low), high))


def _error_of(body: dict[str, Any]) -> str:
    """An OAuth error code, if the answer has one of the standard's shape."""
    error = body.get("error")
    return error[:64] if isinstance(error, str) and error.isascii() else "no error code"


def _unanswered(issuer: str, why: str) -> ValidationFailed:
    return ValidationFailed(
        f"the issuer {issuer} did not answer OpenID Connect discovery ({why})",
        errors=[{"loc": ["body", "issuer"], "msg": "no discovery document", "type": "value_error"}],
    )
