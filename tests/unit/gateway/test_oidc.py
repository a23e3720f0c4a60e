"""The relying party's protocol pieces: PKCE and the authorization request."""

from __future__ import annotations

import base64
import hashlib
from urllib.parse import parse_qs, urlsplit

from gpucloud_gateway.oidc import Provider, authorization_url, pkce_pair

PROVIDER = Provider(
    issuer="https://login.example.com", authorization_endpoint="https://login.example.com/auth",
    token_endpoint="https://login.example.com/token", jwks_uri="https://login.example.com/keys",
)  # fmt: skip


def test_the_challenge_is_the_verifiers_s256() -> None:
    verifier, challenge = pkce_pair()
    digest = hashlib.sha256(verifier.encode()).digest()
    assert challenge == base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
    assert 43 <= len(verifier) <= 128  # RFC 7636's bounds
    assert pkce_pair()[0] != verifier


def test_the_authorization_request_asks_for_a_code_with_pkce_state_nonce_and_groups() -> None:
    url = authorization_url(
        PROVIDER, client_id="gpucloud", redirect_uri="https://gpu.example.com/v1/sso/callback",
        state="s-1", nonce="n-1", challenge="c-1",
    )  # fmt: skip
    parts = urlsplit(url)
    assert f"{parts.scheme}://{parts.netloc}{parts.path}" == PROVIDER.authorization_endpoint
    query = {key: values[0] for key, values in parse_qs(parts.query).items()}
    assert query == {
        "response_type": "code", "client_id": "gpucloud",
        "redirect_uri": "https://gpu.example.com/v1/sso/callback",
        "scope": "openid email profile groups", "state": "s-1", "nonce": "n-1",
        "code_challenge": "c-1", "code_challenge_method": "S256",
    }  # fmt: skip
