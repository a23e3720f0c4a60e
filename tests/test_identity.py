"""The signed identity the gateway forwards and every service verifies."""

from __future__ import annotations

import time

import pytest

from gpucloud_libs.errors import Forbidden, Unauthenticated
from gpucloud_libs.identity import sign_identity, verify_identity

KEY = "k" * 48


def test_a_signed_identity_verifies_with_the_same_key() -> None:
    token = sign_identity(KEY, subject="u-1", role="tenant-user", tenant_id="t-1")
    identity = verify_identity(KEY, token)
    assert (identity.subject, identity.role, identity.tenant_id) == ("u-1", "tenant-user", "t-1")
    assert identity.require_tenant() == "t-1"


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        (None, "missing"),
        ("", "missing"),
        ("garbage", "signature"),
        (
            sign_identity("other-key", subject="u", role="platform-admin", tenant_id=None),
            "signature",
        ),
    ],
)
def test_missing_or_forged_tokens_are_rejected(token: str | None, reason: str) -> None:
    with pytest.raises(Unauthenticated, match=reason):
        verify_identity(KEY, token)


def test_a_tampered_payload_breaks_the_signature() -> None:
    token = sign_identity(KEY, subject="u-1", role="tenant-user", tenant_id="t-1")
    forged = sign_identity(KEY, subject="u-1", role="tenant-user", tenant_id="t-2")
    spliced = forged.split(".")[0] + "." + token.split(".")[1]
    with pytest.raises(Unauthenticated, match="signature"):
        verify_identity(KEY, spliced)


def test_an_expired_token_is_rejected() -> None:
    token = sign_identity(KEY, subject="u-1", role="tenant-user", tenant_id="t-1", ttl_s=30)
    with pytest.raises(Unauthenticated, match="expired"):
        verify_identity(KEY, token, now=time.time() + 31)


def test_roles_are_enforced() -> None:
    user = verify_identity(KEY, sign_identity(KEY, subject="u", role="tenant-user", tenant_id="t"))
    with pytest.raises(Forbidden):
        user.require_role("tenant-admin", "platform-admin")
    admin = verify_identity(
        KEY, sign_identity(KEY, subject="a", role="platform-admin", tenant_id=None)
    )
    with pytest.raises(Forbidden):
        admin.require_tenant()
