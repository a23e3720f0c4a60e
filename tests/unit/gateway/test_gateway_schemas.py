"""The gateway's request bodies (schemas.py) at their bounds: tenant ids that must stay
DNS labels and host fields, a tenant's first user, emails and passwords, what a key for
inference services may hold, and the two ways to sign in; and a principal that never
shows its password generation."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from gpucloud_gateway.schemas import (
    ALL_SCOPES,
    ApiKeyCreate,
    ConsoleSignIn,
    Principal,
    QuotaLimits,
    RateLimit,
    TenantCreate,
    TokenRequest,
    UserCreate,
)

LIMITS = {"maxGpus": 8, "maxInstances": 4, "maxStorageBytes": 10**12}
ADMIN = {"email": "ada@example.com", "name": "Ada", "role": "tenant-admin"}


def tenant(**fields: Any) -> TenantCreate:
    body: dict[str, Any] = {"tenantID": "t-a", "name": "Team A", "limits": LIMITS, "admin": ADMIN}
    body.update(fields)
    return TenantCreate.model_validate(body)


@pytest.mark.parametrize("tenant_id", ["t-a", "acme", "a1-b2-c3", "x" * 32, "42"])
def test_a_tenant_id_is_a_dns_label_of_single_dashed_words(tenant_id: str) -> None:
    assert tenant(tenantID=tenant_id).tenant_id == tenant_id


@pytest.mark.parametrize(
    "tenant_id",
    ["T-A", "t--a", "-ta", "ta-", "t_a", "t.a", "t a", "", "x" * 33, "ünï"],
)
def test_a_tenant_id_that_could_break_a_host_or_namespace_is_refused(tenant_id: str) -> None:
    """`--` separates the fields of an instance host: no tenant id may hold it."""
    with pytest.raises(ValidationError):
        tenant(tenantID=tenant_id)


@pytest.mark.parametrize("role", ["tenant-user", "platform-admin"])
def test_a_tenants_first_user_must_be_its_admin(role: str) -> None:
    with pytest.raises(ValidationError, match="must be a tenant-admin"):
        tenant(admin={**ADMIN, "role": role})


@pytest.mark.parametrize(("weight", "taken"), [(0, False), (0.01, True), (100, True),
                                               (100.5, False), (-1, False)])  # fmt: skip
def test_a_queue_weight_is_above_zero_and_at_most_a_hundred(weight: float, taken: bool) -> None:
    if taken:
        assert tenant(queueWeight=weight).queue_weight == weight
    else:
        with pytest.raises(ValidationError):
            tenant(queueWeight=weight)


@pytest.mark.parametrize(
    "limits",
    [
        {**LIMITS, "maxGpus": -1},
        {**LIMITS, "maxInstances": 1_000_001},
        {**LIMITS, "maxStorageBytes": 2**62 + 1},
        {**LIMITS, "borrowGpus": -1},
        {"maxGpus": 8, "maxInstances": 4},  # storage missing
    ],
)
def test_limits_out_of_bounds_are_refused(limits: dict[str, int]) -> None:
    with pytest.raises(ValidationError):
        QuotaLimits.model_validate(limits)


def test_limits_default_to_no_spend_cap_and_nothing_to_borrow() -> None:
    limits = QuotaLimits.model_validate(LIMITS)
    assert (limits.monthly_spend_cap_cents, limits.borrow_gpus) == (None, 0)


@pytest.mark.parametrize(
    ("rate", "taken"),
    [({"requestsPerS": 0, "burst": 1}, False), ({"requestsPerS": 0.1, "burst": 0}, False),
     ({"requestsPerS": 0.1, "burst": 1}, True), ({"requestsPerS": 100_001, "burst": 1}, False)],
)  # fmt: skip
def test_a_rate_limit_allows_something(rate: dict[str, float], taken: bool) -> None:
    if taken:
        RateLimit.model_validate(rate)
    else:
        with pytest.raises(ValidationError):
            RateLimit.model_validate(rate)


@pytest.mark.parametrize("email", ["ada@example.com", "a.b+c@sub.example.co.uk", "x@y.io"])
def test_an_email_with_a_dotted_domain_is_taken(email: str) -> None:
    assert UserCreate(email=email, name="Ada").email == email


@pytest.mark.parametrize(
    "email", ["ada@example", "ada example@x.com", "ada@@example.com", "@example.com", "ada",
              "a" * 65 + "@example.com"],
)  # fmt: skip
def test_an_email_that_is_no_address_is_refused(email: str) -> None:
    with pytest.raises(ValidationError):
        UserCreate(email=email, name="Ada")


def test_a_user_defaults_to_tenant_user_without_a_password() -> None:
    user = UserCreate(email="ada@example.com", name="Ada")
    assert (user.role, user.password) == ("tenant-user", None)


def test_a_password_has_twelve_characters_at_least_and_never_shows() -> None:
    with pytest.raises(ValidationError):
        UserCreate.model_validate({"email": "a@b.co", "name": "A", "password": "x" * 11})
    user = UserCreate.model_validate(
        {"email": "a@b.co", "name": "A", "password": "correct horse battery"}
    )
    assert user.password is not None
    assert user.password.get_secret_value() == "correct horse battery"
    assert "correct horse" not in repr(user)
    assert "correct horse" not in user.model_dump_json()


def test_a_role_that_does_not_exist_is_refused() -> None:
    with pytest.raises(ValidationError):
        UserCreate.model_validate({"email": "a@b.co", "name": "A", "role": "root"})


def test_a_key_for_inference_services_holds_the_connect_scope_alone() -> None:
    plain = ApiKeyCreate.model_validate({"name": "svc", "serviceIDs": ["chat"]})
    assert (plain.service_ids, plain.scopes) == (["chat"], None)
    said = ApiKeyCreate.model_validate(
        {"name": "svc", "serviceIDs": ["chat"], "scopes": ["instances:connect"]}
    )
    assert said.scopes == ["instances:connect"]
    with pytest.raises(ValidationError, match="the one scope instances:connect"):
        ApiKeyCreate.model_validate(
            {"name": "svc", "serviceIDs": ["chat"], "scopes": ["instances:connect", "storage:read"]}
        )


@pytest.mark.parametrize(
    "service_ids", [[], ["Chat"], ["chat--t-a"], ["x" * 41], [f"s{n}" for n in range(33)]]
)
def test_a_service_key_names_one_to_32_valid_service_ids(service_ids: list[str]) -> None:
    with pytest.raises(ValidationError):
        ApiKeyCreate.model_validate({"name": "svc", "serviceIDs": service_ids})


@pytest.mark.parametrize(
    "scopes", [[], ["instances:admin"], ["admin"], [*ALL_SCOPES, "instances:read"]]
)
def test_a_key_names_known_scopes_and_at_least_one(scopes: list[str]) -> None:
    with pytest.raises(ValidationError):
        ApiKeyCreate.model_validate({"name": "k", "scopes": scopes})


def test_a_key_expiry_must_say_its_time_zone() -> None:
    with pytest.raises(ValidationError):
        ApiKeyCreate.model_validate({"name": "k", "expiresAt": "2027-01-01T00:00:00"})
    aware = ApiKeyCreate.model_validate({"name": "k", "expiresAt": "2027-01-01T00:00:00Z"})
    assert aware.expires_at is not None
    assert aware.expires_at.utcoffset() is not None


@pytest.mark.parametrize(
    ("body", "taken"),
    [
        ({}, True),  # exchange the bearer API key
        ({"email": "a@b.co", "password": "pw"}, True),
        ({"email": "a@b.co"}, False),
        ({"password": "pw"}, False),
        ({"ttlS": 59}, False),
        ({"ttlS": 43_201}, False),
        ({"ttlS": 43_200}, True),
    ],
)
def test_a_token_request_sends_both_email_and_password_or_neither(
    body: dict[str, Any], taken: bool
) -> None:
    if taken:
        TokenRequest.model_validate(body)
    else:
        with pytest.raises(ValidationError):
            TokenRequest.model_validate(body)


@pytest.mark.parametrize(
    ("body", "taken"),
    [
        ({"email": "a@b.co", "password": "pw"}, True),
        ({"apiKey": "gpc_k_" + "s" * 20}, True),
        ({"email": "a@b.co", "password": "pw", "apiKey": "gpc_k_" + "s" * 20}, False),
        ({}, False),
        ({"email": "a@b.co"}, False),
        ({"password": "pw", "apiKey": "gpc_k_" + "s" * 20}, False),
    ],
)
def test_the_console_signs_in_one_way_at_a_time(body: dict[str, Any], taken: bool) -> None:
    if taken:
        ConsoleSignIn.model_validate(body)
    else:
        with pytest.raises(ValidationError):
            ConsoleSignIn.model_validate(body)


def test_a_principal_shows_its_ids_in_camel_case_and_never_its_password_generation() -> None:
    principal = Principal(
        subject="u-1", user_id="u-1", key_id=None, role="tenant-admin", tenant_id="t-a",
        scopes=["instances:read"], via="token", service_ids=None, source_version=7,
    )  # fmt: skip
    shown = principal.model_dump(by_alias=True)
    assert shown == {
        "subject": "u-1",
        "userID": "u-1",
        "keyID": None,
        "role": "tenant-admin",
        "tenantID": "t-a",
        "scopes": ["instances:read"],
        "via": "token",
        "serviceIDs": None,
        "project": None,
        "projects": None,
    }
    assert principal.source_version == 7
