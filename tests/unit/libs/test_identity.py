"""The signed identity the gateway forwards and every service verifies (Ed25519)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time

import pytest

from gpucloud_libs.errors import Forbidden, Unauthenticated
from gpucloud_libs.identity import (
    IdentitySigner,
    IdentityVerifier,
    Role,
    WeakKey,
    generate_key_pair,
)
from gpucloud_libs.project_shares import visible_projects

GATEWAY_PRIVATE, GATEWAY_PUBLIC = generate_key_pair()
INSTANCES_PRIVATE, INSTANCES_PUBLIC = generate_key_pair()
GATEWAY = IdentitySigner("gateway", GATEWAY_PRIVATE, setting="TEST")
INSTANCES = IdentitySigner("instances", INSTANCES_PRIVATE, setting="TEST")
VERIFIER = IdentityVerifier(
    {"gateway": GATEWAY_PUBLIC, "instances": INSTANCES_PUBLIC}, setting="TEST", audience="instances"
)
PATH = "/gpu-instances/nb-1"


def signed(
    signer: IdentitySigner = GATEWAY,
    *,
    role: Role = "tenant-user",
    tenant_id: str | None = "t-1",
    method: str = "GET",
    path: str = PATH,
    query: str = "",
    body: bytes = b"",
    audience: str = "instances",
    ttl_s: float = 60,
) -> str:
    return signer.sign(
        subject="u-1", role=role, tenant_id=tenant_id, audience=audience, method=method,
        path=path, query=query, body=body, ttl_s=ttl_s,
    )  # fmt: skip


def old_shared_key_token(key: str) -> str:
    """What the gateway forwarded before Ed25519: an HMAC-SHA256 over the identity."""
    claims = {
        "subject": "u-1",
        "role": "platform-admin",
        "tenant_id": None,
        "expires_at": time.time() + 60,
    }
    payload = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    mac = hmac.new(key.encode(), payload.encode(), hashlib.sha256).digest()
    return f"{payload}.{base64.urlsafe_b64encode(mac).rstrip(b'=').decode()}"


def test_a_signed_identity_verifies_for_the_request_it_was_made_for() -> None:
    identity = VERIFIER.verify(signed(), method="GET", path=PATH)
    assert (identity.subject, identity.role, identity.tenant_id) == ("u-1", "tenant-user", "t-1")
    assert identity.issuer == "gateway"
    assert identity.require_tenant() == "t-1"


@pytest.mark.parametrize(
    ("method", "path"), [("DELETE", PATH), ("GET", "/gpu-instances/nb-2"), ("GET", "/specs")]
)
def test_a_token_does_not_travel_to_another_method_or_path(method: str, path: str) -> None:
    with pytest.raises(Unauthenticated, match="another request"):
        VERIFIER.verify(signed(), method=method, path=path)


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        (None, "missing"),
        ("", "missing"),
        ("garbage", "malformed"),
        (old_shared_key_token("k" * 48), "signer is not trusted"),
        (signed(IdentitySigner("gateway", generate_key_pair()[0], setting="T")), "signature"),
        (signed(IdentitySigner("intruder", generate_key_pair()[0], setting="T")), "not trusted"),
    ],
)
def test_missing_forged_and_old_format_tokens_are_rejected(token: str | None, reason: str) -> None:
    with pytest.raises(Unauthenticated, match=reason):
        VERIFIER.verify(token, method="GET", path=PATH)


def test_a_token_is_good_once_for_its_service_query_and_body_alone() -> None:
    """Review M6: a token seen on the wire cannot be sent again within its minute, with
    another body or query, to another service, or as it was."""
    body = b'{"image": "jupyter"}'
    with pytest.raises(Unauthenticated, match="another request body"):
        VERIFIER.verify(signed(method="PATCH", body=body), method="PATCH", path=PATH, body=b"{}")
    with pytest.raises(Unauthenticated, match="another request"):
        VERIFIER.verify(signed(query="limit=5"), method="GET", path=PATH, query="limit=500")
    with pytest.raises(Unauthenticated, match="for the storage service"):
        VERIFIER.verify(signed(audience="storage"), method="GET", path=PATH)
    token = signed(method="PATCH", query="dryRun=true", body=body)
    once = VERIFIER.verify(token, method="PATCH", path=PATH, query="dryRun=true", body=body)
    assert once.subject == "u-1"
    with pytest.raises(Unauthenticated, match="already used"):
        VERIFIER.verify(token, method="PATCH", path=PATH, query="dryRun=true", body=body)


def test_a_tampered_payload_breaks_the_signature() -> None:
    token = signed(tenant_id="t-1")
    forged = signed(tenant_id="t-2")
    spliced = forged.split(".")[0] + "." + token.split(".")[1]
    with pytest.raises(Unauthenticated, match="signature"):
        VERIFIER.verify(spliced, method="GET", path=PATH)


def test_an_expired_token_is_rejected() -> None:
    with pytest.raises(Unauthenticated, match="expired"):
        VERIFIER.verify(signed(ttl_s=30), method="GET", path=PATH, now=time.time() + 31)


def test_only_the_gateway_signs_for_a_platform_admin() -> None:
    admin = VERIFIER.verify(signed(role="platform-admin", tenant_id=None), method="GET", path=PATH)
    assert admin.is_platform_admin
    with pytest.raises(Unauthenticated, match="only the gateway"):
        VERIFIER.verify(
            signed(INSTANCES, role="platform-admin", tenant_id=None), method="GET", path=PATH
        )
    tenant_call = VERIFIER.verify(signed(INSTANCES, role="tenant-admin"), method="GET", path=PATH)
    assert (tenant_call.issuer, tenant_call.tenant_id) == ("instances", "t-1")


def test_roles_are_enforced() -> None:
    user = VERIFIER.verify(signed(), method="GET", path=PATH)
    with pytest.raises(Forbidden):
        user.require_role("tenant-admin", "platform-admin")
    admin = VERIFIER.verify(signed(role="platform-admin", tenant_id=None), method="GET", path=PATH)
    with pytest.raises(Forbidden):
        admin.require_tenant()


@pytest.mark.parametrize(
    ("keys", "says"),
    [
        ({}, "no key for 'gateway'"),
        ({"gateway": "change-me"}, "not a base64url Ed25519 key"),
        ({"gateway": GATEWAY_PUBLIC, "instances": "QUJD"}, "not a base64url Ed25519 key"),
    ],
)
def test_unusable_public_keys_are_refused_at_the_check(keys: dict[str, str], says: str) -> None:
    with pytest.raises(WeakKey, match=says):
        IdentityVerifier(keys, setting="GPUCLOUD_IDENTITY_PUBLIC_KEYS", audience="x").check()


@pytest.mark.parametrize(("key", "says"), [("", "is not set"), ("change-me", "is not a base64url")])
def test_an_unusable_private_key_is_refused_at_the_check(key: str, says: str) -> None:
    with pytest.raises(WeakKey, match=f"GPUCLOUD_IDENTITY_PRIVATE_KEY {says}"):
        IdentitySigner("gateway", key, setting="GPUCLOUD_IDENTITY_PRIVATE_KEY").check()


def test_a_key_of_one_project_says_so_and_a_token_of_none_names_no_project() -> None:
    token = GATEWAY.sign(subject="u-1", role="tenant-user", tenant_id="t-1",
                         audience="instances", method="GET", path=PATH, project="vision")  # fmt: skip
    assert VERIFIER.verify(token, method="GET", path=PATH).project == "vision"
    plain = signed()
    claims = json.loads(base64.urlsafe_b64decode(plain.split(".")[0] + "=="))
    assert "project" not in claims  # what a service from before project keys reads
    assert VERIFIER.verify(plain, method="GET", path=PATH).project is None


def test_the_projects_a_caller_sees_travel_signed_and_fail_closed_when_unsaid() -> None:
    """Decision 142: the gateway signs the projects whose work the caller sees; a token
    that names none (a gateway from before) shows a tenant user `default`'s work alone,
    never every project's."""
    seen = GATEWAY.sign(subject="u-1", role="tenant-user", tenant_id="t-1", audience="instances",
                        method="GET", path=PATH, projects=("default", "vision"))  # fmt: skip
    caller = VERIFIER.verify(seen, method="GET", path=PATH)
    assert caller.projects == ("default", "vision")
    assert caller.sees_project("vision")
    assert not caller.sees_project("nlp")
    unsaid = VERIFIER.verify(signed(role="tenant-user"), method="GET", path=PATH)
    assert unsaid.projects == ("default",)
    assert not unsaid.sees_project("vision")
    key = GATEWAY.sign(subject="u-1", role="tenant-user", tenant_id="t-1", audience="instances",
                       method="GET", path=PATH, project="vision")  # fmt: skip
    assert VERIFIER.verify(key, method="GET", path=PATH).projects == ("vision",)
    admin = VERIFIER.verify(signed(role="tenant-admin"), method="GET", path=PATH)
    assert admin.projects is None
    assert admin.sees_project("vision")


def test_a_tenant_user_sees_default_and_the_projects_she_is_in() -> None:
    projects: dict[str, dict[str, list[str]]] = {
        "vision": {"members": ["u-ada"]},
        "nlp": {"members": []},
    }
    assert visible_projects(projects, user_id="u-ada", role="tenant-user", key_project=None) == (
        "default", "vision",
    )  # fmt: skip
    assert visible_projects(projects, user_id="u-bob", role="tenant-user", key_project=None) == (
        "default",
    )  # fmt: skip
    assert (
        visible_projects(projects, user_id="u-root", role="tenant-admin", key_project=None) is None
    )
    assert visible_projects(projects, user_id="u-ada", role="tenant-user", key_project="vision") == (
        "vision",
    )  # fmt: skip
