"""ID tokens as an attacker crafts them (issue "Projects are a boundary", item 7).

A hostile issuer on loopback serves its keys (JWKS) and the tests hand the gateway's
OIDC client tokens it made: the honest one is taken, and each crafted one is refused,
so that removing any one check makes its test fail. Dex, in the e2e suite, stays the
honest path end to end.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import jwt
import pytest
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import rsa

from gpucloud_gateway.oidc import OidcClient, Provider, SignInRefused
from gpucloud_gateway.sso_accounts import verified_email
from gpucloud_libs.outbound_guard import OutboundGuard

CLIENT_ID = "gpucloud-acme"
NONCE = "nonce-of-this-sign-in"


def _private_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


ISSUERS_KEY, STRANGERS_KEY = _private_key(), _private_key()


def _jwk(key: rsa.RSAPrivateKey, kid: str) -> dict[str, Any]:
    public: dict[str, Any] = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    return public | {"kid": kid, "use": "sig", "alg": "RS256"}


@pytest.fixture
async def issuer() -> AsyncIterator[Provider]:
    """A provider whose JWKS lists the issuer's one key, `k1`."""

    async def jwks(_: web.Request) -> web.Response:
        return web.json_response({"keys": [_jwk(ISSUERS_KEY, "k1")]})

    app = web.Application()
    app.router.add_get("/jwks", jwks)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    base = f"http://127.0.0.1:{port}"
    try:
        yield Provider(base, f"{base}/auth", f"{base}/token", f"{base}/jwks")
    finally:
        await runner.cleanup()


@pytest.fixture
async def client() -> AsyncIterator[OidcClient]:
    guard = OutboundGuard(field="issuer", allow_private_networks=False, loopback_only=True)
    oidc = OidcClient(guard, require_https=False)
    yield oidc
    await oidc.close()


def _claims(provider: Provider, **changed: Any) -> dict[str, Any]:
    now = int(time.time())
    claims = {"iss": provider.issuer, "aud": CLIENT_ID, "sub": "ada", "iat": now,
              "exp": now + 300, "nonce": NONCE, "email": "ada@acme.test",
              "email_verified": True}  # fmt: skip
    claims.update(changed)
    return {name: value for name, value in claims.items() if value is not None}


def _token(claims: dict[str, Any], *, key: rsa.RSAPrivateKey = ISSUERS_KEY, kid: str = "k1") -> str:
    return jwt.encode(claims, key, algorithm="RS256", headers={"kid": kid})


def _unsigned(claims: dict[str, Any]) -> str:
    """`alg: none`: a token with no signature at all."""

    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'none', 'typ': 'JWT', 'kid': 'k1'})}.{part(claims)}."


async def test_the_honest_token_is_taken(client: OidcClient, issuer: Provider) -> None:
    claims = await client.claims(issuer, _token(_claims(issuer)), client_id=CLIENT_ID, nonce=NONCE)
    assert (claims["sub"], verified_email(claims)) == ("ada", "ada@acme.test")


async def test_a_forged_signature_is_refused(client: OidcClient, issuer: Provider) -> None:
    # The issuer's key id, signed with another key.
    forged = _token(_claims(issuer), key=STRANGERS_KEY, kid="k1")
    with pytest.raises(SignInRefused, match="failed a check"):
        await client.claims(issuer, forged, client_id=CLIENT_ID, nonce=NONCE)


async def test_a_key_the_issuer_does_not_list_is_refused(
    client: OidcClient, issuer: Provider
) -> None:
    unknown = _token(_claims(issuer), key=STRANGERS_KEY, kid="k-stranger")
    with pytest.raises(SignInRefused, match="names a key the issuer does not list"):
        await client.claims(issuer, unknown, client_id=CLIENT_ID, nonce=NONCE)


@pytest.mark.parametrize(
    "changed",
    [
        {"aud": "another-tenants-client"},
        {"iss": "https://evil.example"},
        {"exp": int(time.time()) - 3600, "iat": int(time.time()) - 7200},
        {"exp": None},
        {"sub": None},
    ],
    ids=["wrong-audience", "wrong-issuer", "expired", "no-expiry", "no-subject"],
)
async def test_a_token_with_a_wrong_claim_is_refused(
    client: OidcClient, issuer: Provider, changed: dict[str, Any]
) -> None:
    with pytest.raises(SignInRefused, match="failed a check"):
        await client.claims(
            issuer, _token(_claims(issuer, **changed)), client_id=CLIENT_ID, nonce=NONCE
        )


@pytest.mark.parametrize(
    "nonce", ["nonce-of-an-earlier-sign-in", None], ids=["replayed", "missing"]
)
async def test_a_token_of_another_sign_in_is_refused(
    client: OidcClient, issuer: Provider, nonce: str | None
) -> None:
    token = _token(_claims(issuer, nonce=nonce))
    with pytest.raises(SignInRefused, match="nonce is not this sign-in's"):
        await client.claims(issuer, token, client_id=CLIENT_ID, nonce=NONCE)


async def test_an_unsigned_token_is_refused(client: OidcClient, issuer: Provider) -> None:
    with pytest.raises(SignInRefused, match="failed a check"):
        await client.claims(issuer, _unsigned(_claims(issuer)), client_id=CLIENT_ID, nonce=NONCE)


@pytest.mark.parametrize("verified", [False, None, "true"], ids=["false", "absent", "a-string"])
async def test_an_email_the_provider_does_not_vouch_for_is_refused(
    client: OidcClient, issuer: Provider, verified: object
) -> None:
    token = _token(_claims(issuer, email_verified=verified))
    claims = await client.claims(issuer, token, client_id=CLIENT_ID, nonce=NONCE)
    with pytest.raises(SignInRefused, match="no verified email"):
        verified_email(claims)
