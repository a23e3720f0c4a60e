"""The OpenID Connect relying party's protocol: discovery, the authorization code with
PKCE, and the ID token's checks (signature from the issuer's keys, issuer, audience,
expiry, nonce). Every dial goes through the gateway's egress policy."""

from __future__ import annotations

import base64
import hashlib
import secrets
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import aiohttp
import jwt

from gpucloud_libs.egress import EgressPolicy, EgressRefused
from gpucloud_libs.errors import ValidationFailed

DISCOVERY_TIMEOUT_S = 5.0
#: What a refused sign-in says: the reason is logged, never shown (it would tell an
#: attacker which part was wrong).
REFUSED = "the sign-in was refused; ask your tenant's admin, or sign in another way"


class SignInRefused(Exception):
    """The provider or its answer failed a check; the message is for the log only."""


@dataclass(frozen=True)
class Provider:
    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str
    device_authorization_endpoint: str | None = None


def pkce_pair() -> tuple[str, str]:
    """A code verifier and its S256 challenge (RFC 7636)."""
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode()).digest()
    return verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def authorization_url(
    provider: Provider, *, client_id: str, redirect_uri: str, state: str, nonce: str,
    challenge: str,
) -> str:  # fmt: skip
    query = urlencode({
        "response_type": "code", "client_id": client_id, "redirect_uri": redirect_uri,
        "scope": "openid email profile groups", "state": state, "nonce": nonce,
        "code_challenge": challenge, "code_challenge_method": "S256",
    })  # fmt: skip
    return f"{provider.authorization_endpoint}?{query}"


class OidcClient:
    def __init__(self, egress: EgressPolicy) -> None:
        self._egress = egress
        self._session: aiohttp.ClientSession | None = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(socket_factory=self._egress.socket_factory()),
                timeout=aiohttp.ClientTimeout(total=DISCOVERY_TIMEOUT_S),
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def discover(self, issuer: str) -> Provider:
        """The issuer's endpoints, from its discovery document; a 422 saying why when it
        does not answer one, or answers for another issuer."""
        issuer = issuer.rstrip("/")
        try:
            self._egress.check_url(issuer, "the issuer")
        except EgressRefused:
            raise _unanswered(issuer, "it is outside what this platform may dial") from None
        url = f"{issuer}/.well-known/openid-configuration"
        try:
            async with self._http().get(url) as answer:
                if answer.status != 200:
                    raise _unanswered(issuer, f"HTTP {answer.status}")
                document: dict[str, Any] = await answer.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as error:
            raise _unanswered(issuer, type(error).__name__) from None
        if str(document.get("issuer", "")).rstrip("/") != issuer:
            raise _unanswered(issuer, f"it names itself {document.get('issuer')!r}")
        try:
            return Provider(
                issuer=issuer, authorization_endpoint=document["authorization_endpoint"],
                token_endpoint=document["token_endpoint"], jwks_uri=document["jwks_uri"],
                device_authorization_endpoint=document.get("device_authorization_endpoint"),
            )  # fmt: skip
        except KeyError as missing:
            raise _unanswered(issuer, f"its document has no {missing}") from None

    async def exchange(
        self, provider: Provider, *, client_id: str, client_secret: str, code: str,
        redirect_uri: str, verifier: str,
    ) -> str:  # fmt: skip
        """The ID token for an authorization code."""
        form = {"grant_type": "authorization_code", "code": code, "redirect_uri": redirect_uri,
                "code_verifier": verifier}  # fmt: skip
        return await self._token(provider, form, client_id, client_secret)

    async def _token(
        self, provider: Provider, form: dict[str, str], client_id: str, client_secret: str
    ) -> str:
        auth = aiohttp.BasicAuth(client_id, client_secret)
        try:
            async with self._http().post(provider.token_endpoint, data=form, auth=auth) as answer:
                body: dict[str, Any] = await answer.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as error:
            raise SignInRefused(f"the token endpoint did not answer: {error!r}") from None
        if answer.status != 200 or "id_token" not in body:
            raise SignInRefused(f"the token endpoint answered {answer.status}: {body.get('error')}")
        return str(body["id_token"])

    async def claims(
        self, provider: Provider, id_token: str, *, client_id: str, nonce: str | None
    ) -> dict[str, Any]:
        """The ID token's claims, once its signature, issuer, audience, expiry and nonce
        hold."""
        try:
            async with self._http().get(provider.jwks_uri) as answer:
                keys = jwt.PyJWKSet.from_dict(await answer.json(content_type=None))
            kid = jwt.get_unverified_header(id_token).get("kid")
            key = next(k for k in keys.keys if kid is None or k.key_id == kid)
            claims: dict[str, Any] = jwt.decode(
                id_token, key=key.key, algorithms=["RS256", "ES256"], audience=client_id,
                issuer=provider.issuer, options={"require": ["exp", "iat", "sub"]},
            )  # fmt: skip
        except (
            aiohttp.ClientError,
            TimeoutError,
            ValueError,
            StopIteration,
            jwt.PyJWTError,
        ) as error:
            raise SignInRefused(f"the ID token failed a check: {error!r}") from None
        if nonce is not None and claims.get("nonce") != nonce:
            raise SignInRefused("the ID token's nonce is not this sign-in's")
        return claims


def _unanswered(issuer: str, why: str) -> ValidationFailed:
    return ValidationFailed(
        f"the issuer {issuer} did not answer OpenID Connect discovery ({why})",
        errors=[{"loc": ["body", "issuer"], "msg": "no discovery document", "type": "value_error"}],
    )
