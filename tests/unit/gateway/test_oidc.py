"""The relying party's protocol pieces: PKCE, the authorization request, client
credentials, the issuer's name, and the role a user's groups give."""

from __future__ import annotations

import base64
import hashlib
from datetime import UTC, datetime
from urllib.parse import parse_qs, urlsplit

import pytest

from gpucloud_gateway.documents import SsoConfigDoc
from gpucloud_gateway.oidc import (
    Provider,
    SignInRefused,
    authorization_url,
    client_auth,
    pkce_pair,
    same_issuer,
)
from gpucloud_gateway.sso_accounts import role_of

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


def test_client_credentials_are_form_encoded_before_basic_auth() -> None:
    """RFC 6749 2.3.1: an id with `:` is sent encoded, so it stays one id."""
    scheme, _, encoded = client_auth("team:gpucloud", "s3cret/+:=")["Authorization"].partition(" ")
    assert scheme == "Basic"
    assert base64.b64decode(encoded).decode() == "team%3Agpucloud:s3cret%2F%2B%3A%3D"


@pytest.mark.parametrize(
    ("named", "asked", "same"),
    [
        ("https://login.example.com/", "https://login.example.com", True),
        ("https://login.example.com", "https://login.example.com/", True),
        ("https://login.example.com/realms/a", "https://login.example.com/realms/b", False),
        ("https://evil.example.com", "https://login.example.com", False),
    ],
)
def test_a_discovery_document_names_the_issuer_asked_for(
    named: str, asked: str, same: bool
) -> None:
    assert same_issuer(named, asked) is same


def test_the_highest_role_of_a_users_groups_wins_and_none_is_refused() -> None:
    config: SsoConfigDoc = {
        "_id": "t-1", "issuer": "https://login.example.com", "client_id": "gpucloud",
        "client_secret_sealed": "", "group_roles": {"ml": "tenant-user", "ops": "tenant-admin"},
        "default_role": None, "create_users": True, "cli_sign_in": False,
        "updated_at": datetime.now(UTC),
    }  # fmt: skip
    assert role_of(config, {"groups": ["ml", "ops", "x"]}, held=None) == "tenant-admin"
    assert role_of(config, {"groups": ["ml"]}, held="tenant-admin") == "tenant-user"
    # Mapped groups decide: out of every mapped group, out of the tenant (held or not).
    with pytest.raises(SignInRefused):
        role_of(config, {"groups": ["x"]}, held="tenant-admin")
    with pytest.raises(SignInRefused):
        role_of(config, {"groups": "ml"}, held=None)  # not a list: no group at all
    assert role_of({**config, "default_role": "tenant-user"}, {}, held=None) == "tenant-user"
    # A tenant that maps no group keeps roles to itself: the role held stays.
    unmapped: SsoConfigDoc = {**config, "group_roles": {}}
    assert role_of(unmapped, {"groups": ["ops"]}, held="tenant-admin") == "tenant-admin"
    with pytest.raises(SignInRefused):
        role_of(unmapped, {}, held=None)  # a new user, and no default role
