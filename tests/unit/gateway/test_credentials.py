"""The gateway's credential formats (credentials.py): which strings read as an API key,
the bootstrap key's strength, key and password hashes, and session tokens that hold
only for their audience, their secret and their lifetime."""

from __future__ import annotations

import hashlib
import hmac
import re
import time

import pytest

from gpucloud_gateway.credentials import (
    KEY_PREFIX,
    TOKEN_PREFIX,
    SessionToken,
    api_key_matches,
    check_bootstrap_key,
    hash_api_key,
    hash_password,
    issue_token,
    new_api_key,
    parse_api_key,
    password_matches,
    read_token,
    seal,
    sign_in_matches,
    unseal,
)
from gpucloud_libs.identity import WeakKey

SECRET = "the-gateways-session-secret-9f8e7d6c5b4a39281706"
HOST = "nb-1--8888--t-a.instances.example.com"
STRONG = "Zq3vX9pL2mR7tY4wK8nB1cJ6hF5gD0sA"  # 32 characters, many distinct


def claims(**fields: object) -> SessionToken:
    values: dict[str, object] = {
        "source": "user", "source_id": "u-ada", "role": "tenant-user", "tenant_id": "t-a",
        "scopes": ["instances:read"], "audience": "api", "expires_at": time.time() + 60,
    }  # fmt: skip
    values.update(fields)
    return SessionToken.model_validate(values)


def test_a_new_key_reads_back_as_its_own_id() -> None:
    key_id, key = new_api_key()
    assert re.fullmatch(r"[0-9a-f]{12}", key_id)
    assert key.startswith(f"{KEY_PREFIX}{key_id}_")
    assert parse_api_key(key) == key_id
    assert len(key) - len(f"{KEY_PREFIX}{key_id}_") >= 43  # 256 bits, base64url
    assert new_api_key() != new_api_key()


@pytest.mark.parametrize(
    ("presented", "key_id"),
    [
        ("gpc_abc_" + "s" * 16, "abc"),
        ("gpc_abc_" + "s" * 15, None),  # the secret too short
        ("gpc_" + "a" * 32 + "_" + "s" * 16, "a" * 32),
        ("gpc_" + "a" * 33 + "_" + "s" * 16, None),  # the id too long
        ("gpc__" + "s" * 16, None),  # no id
        ("gpc_abc" + "s" * 16, None),  # no separator
        ("gpc_abc_s_-_" + "s" * 12, "abc"),  # a secret may hold `_` and `-`
        ("GPC_abc_" + "s" * 16, None),
        ("gpt_abc_" + "s" * 16, None),  # a session token, not a key
        ("Bearer gpc_abc_" + "s" * 16, None),
        ("", None),
    ],
)
def test_only_a_well_formed_key_gives_a_key_id(presented: str, key_id: str | None) -> None:
    assert parse_api_key(presented) == key_id


def test_the_bootstrap_key_must_be_the_bootstrap_id_with_a_strong_secret() -> None:
    check_bootstrap_key(f"gpc_bootstrap_{STRONG}")
    with pytest.raises(WeakKey, match="must read gpc_bootstrap_"):
        check_bootstrap_key(f"gpc_admin_{STRONG}")
    with pytest.raises(WeakKey, match="too short"):
        check_bootstrap_key(f"gpc_bootstrap_{STRONG[:31]}")
    with pytest.raises(WeakKey, match="placeholder"):
        check_bootstrap_key("gpc_bootstrap_" + "ab" * 20)


def test_a_key_is_stored_as_its_sha256_and_matches_only_itself() -> None:
    key = "gpc_abc_" + "s" * 43
    stored = hash_api_key(key)
    assert stored == hashlib.sha256(key.encode()).hexdigest()
    assert key not in stored
    assert api_key_matches(key, stored)
    assert not api_key_matches(key + "x", stored)
    assert not api_key_matches("gpc_abc_ünïcode", stored)  # no TypeError for non-ASCII


def test_a_password_is_stored_salted_and_matches_only_itself() -> None:
    stored = hash_password("correct horse battery")
    assert re.fullmatch(r"scrypt\$16384\$8\$1\$[0-9a-f]{32}\$[0-9a-f]{128}", stored)
    assert password_matches("correct horse battery", stored)
    assert not password_matches("correct horse battery ", stored)
    assert hash_password("correct horse battery") != stored  # a fresh salt each time


@pytest.mark.parametrize(
    "stored", ["", "plain-text", "scrypt$16384$8$1$zz$00", "scrypt$x$8$1$00$00", "a$b$c"]
)
def test_a_stored_password_that_is_no_scrypt_hash_matches_nothing(stored: str) -> None:
    assert not password_matches("anything", stored)


def test_signing_in_as_nobody_fails_even_with_a_password() -> None:
    stored = hash_password("correct horse battery")
    assert sign_in_matches("correct horse battery", stored)
    assert not sign_in_matches("correct horse battery", None)
    assert not sign_in_matches("wrong", stored)


def test_a_sealed_payload_opens_only_with_its_key_and_unchanged() -> None:
    key, other = b"k" * 32, b"o" * 32
    token = seal(key, b'{"a":1}')
    assert unseal(key, token) == b'{"a":1}'
    assert unseal(other, token) is None
    payload, _, mac = token.partition(".")
    assert unseal(key, payload + "x." + mac) is None
    assert unseal(key, payload) is None  # no signature at all
    assert unseal(key, "") is None


def test_a_token_holds_its_claims_for_its_audience() -> None:
    token = issue_token(SECRET, claims(audience=HOST))
    assert token.startswith(TOKEN_PREFIX)
    read = read_token(SECRET, token, audience=HOST)
    assert read is not None
    assert (read.source_id, read.role, read.tenant_id, read.scopes) == (
        "u-ada",
        "tenant-user",
        "t-a",
        ["instances:read"],
    )


@pytest.mark.parametrize(
    "audience", ["api", "nb-2--8888--t-a.instances.example.com", f"link:{HOST}", HOST.upper()]
)
def test_a_token_for_one_host_is_refused_everywhere_else(audience: str) -> None:
    assert read_token(SECRET, issue_token(SECRET, claims(audience=HOST)), audience=audience) is None


def test_an_expired_token_is_refused() -> None:
    token = issue_token(SECRET, claims(expires_at=time.time() - 1))
    assert read_token(SECRET, token, audience="api") is None


def test_a_token_from_another_secret_or_without_its_prefix_is_refused() -> None:
    token = issue_token(SECRET, claims())
    assert read_token("another-session-secret-0123456789abcdef", token, audience="api") is None
    assert read_token(SECRET, token.removeprefix(TOKEN_PREFIX), audience="api") is None
    assert read_token(SECRET, "gpc_" + token.removeprefix(TOKEN_PREFIX), audience="api") is None


def test_a_token_whose_claims_were_changed_is_refused() -> None:
    honest = issue_token(SECRET, claims())
    forged = issue_token("guessed-secret-0123456789abcdefghij", claims(role="platform-admin"))
    payload = forged.removeprefix(TOKEN_PREFIX).partition(".")[0]
    mac = honest.partition(".")[2]
    assert read_token(SECRET, f"{TOKEN_PREFIX}{payload}.{mac}", audience="api") is None


def test_a_genuinely_sealed_token_with_claims_that_do_not_parse_is_refused() -> None:
    key = hmac.new(SECRET.encode(), b"gpucloud session token v1", hashlib.sha256).digest()
    for payload in (b"not json", b'{"role":"platform-admin"}', b"[]"):
        assert read_token(SECRET, TOKEN_PREFIX + seal(key, payload), audience="api") is None
    # The same derivation with whole claims is a token: the key above is the real one.
    whole = claims().model_dump_json().encode()
    assert read_token(SECRET, TOKEN_PREFIX + seal(key, whole), audience="api") is not None


def test_a_token_carries_the_password_generation_it_was_minted_under() -> None:
    """A token minted before a password change carries the generation it was minted
    under; one from before generations existed reads as 0."""
    old = read_token(SECRET, issue_token(SECRET, claims()), audience="api")
    new = read_token(SECRET, issue_token(SECRET, claims(source_version=3)), audience="api")
    assert old is not None
    assert new is not None
    assert (old.source_version, new.source_version) == (0, 3)
