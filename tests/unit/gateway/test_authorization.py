"""What a caller may do (authorization.py), for the decisions that need no stored tenant:
the roles, then the scopes, a read or a platform admin's change that needs no tenant's
status, and the per-key bucket. The store behind the identity cache is a MongoDB client
that has no server: a test that reached it would fail, so none of these read a tenant.
A suspended tenant's refusal needs its stored status and is the end-to-end suite's."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pymongo import AsyncMongoClient

from gpucloud_gateway.authorization import Authorizer, InsufficientScope, default_rate_limit
from gpucloud_gateway.identity_cache import IdentityCache
from gpucloud_gateway.ratelimit import RateLimiter
from gpucloud_gateway.routes import ADMINS, EVERYONE, PLATFORM_ADMIN, TENANT_MEMBERS
from gpucloud_gateway.schemas import Principal, RateLimit, Scope
from gpucloud_gateway.settings import GatewaySettings
from gpucloud_gateway.store import ApiKeyStore, TenantStore, UserStore
from gpucloud_libs.errors import Forbidden, RateLimited
from gpucloud_libs.identity import Role

SETTINGS = GatewaySettings(key_rate_limit_per_s=0.001, key_rate_limit_burst=2)


@pytest.fixture
async def authorizer() -> AsyncIterator[Authorizer]:
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
        "mongodb://127.0.0.1:1/", serverSelectionTimeoutMS=100
    )
    db = client["gpucloud_unit_no_server"]
    cache = IdentityCache(ApiKeyStore(db), UserStore(db), TenantStore(db), ttl_s=2.0)
    yield Authorizer(SETTINGS, cache, RateLimiter())
    await client.close()


def principal(
    role: Role = "tenant-user",
    *,
    tenant_id: str | None = "t-a",
    scopes: list[Scope] | None = None,
    key_id: str | None = "k-1",
) -> Principal:
    return Principal(
        subject="u-1", user_id="u-1", key_id=key_id, role=role, tenant_id=tenant_id,
        scopes=["instances:read"] if scopes is None else scopes,
        via="api_key" if key_id else "token",
    )  # fmt: skip


async def test_a_role_outside_the_routes_roles_is_refused_naming_them(
    authorizer: Authorizer,
) -> None:
    with pytest.raises(Forbidden) as refused:
        await authorizer.permit(
            principal("tenant-user"), roles=ADMINS, scope="instances:read", method="GET"
        )
    assert type(refused.value) is Forbidden
    assert (
        refused.value.detail == "this action needs one of the roles: platform-admin, tenant-admin"
    )


async def test_a_platform_admin_is_refused_what_is_for_tenant_members(
    authorizer: Authorizer,
) -> None:
    admin = principal("platform-admin", tenant_id=None, scopes=["instances:read"])
    with pytest.raises(Forbidden, match="tenant-admin, tenant-user"):
        await authorizer.permit(admin, roles=TENANT_MEMBERS, scope="instances:read", method="GET")


async def test_a_missing_scope_is_its_own_refusal_naming_the_scope(authorizer: Authorizer) -> None:
    reader = principal(scopes=["instances:read", "storage:read"])
    with pytest.raises(InsufficientScope) as refused:
        await authorizer.permit(reader, roles=EVERYONE, scope="instances:write", method="POST")
    error = refused.value
    assert (error.status, error.code) == (403, "insufficient_scope")
    assert error.extensions == {"scope": "instances:write"}
    assert error.detail == "this credential lacks the scope 'instances:write'"


async def test_the_role_is_checked_before_the_scope(authorizer: Authorizer) -> None:
    with pytest.raises(Forbidden) as refused:
        await authorizer.permit(
            principal(scopes=[]), roles=PLATFORM_ADMIN, scope="admin:read", method="GET"
        )
    assert not isinstance(refused.value, InsufficientScope)


@pytest.mark.parametrize("method", ["GET", "HEAD", "OPTIONS"])
async def test_a_tenant_members_read_needs_no_look_at_the_tenant(
    authorizer: Authorizer, method: str
) -> None:
    await authorizer.permit(principal(), roles=EVERYONE, scope="instances:read", method=method)


async def test_a_platform_admins_change_needs_no_tenant(authorizer: Authorizer) -> None:
    admin = principal("platform-admin", tenant_id=None, scopes=["instances:write"])
    await authorizer.permit(admin, roles=PLATFORM_ADMIN, scope="instances:write", method="POST")
    await authorizer.check_writable(admin, "DELETE")


async def test_an_api_key_has_its_own_bucket(authorizer: Authorizer) -> None:
    admin = principal("platform-admin", tenant_id=None, key_id="k-admin")
    for _ in range(2):
        await authorizer.rate_limit(admin)
    with pytest.raises(RateLimited, match=re.escape("this API key allows 0.001 requests/s")):
        await authorizer.rate_limit(admin)
    # Another key of the same holder is not held back.
    await authorizer.rate_limit(principal("platform-admin", tenant_id=None, key_id="k-other"))


async def test_checking_permission_again_spends_no_token(authorizer: Authorizer) -> None:
    """An open connection is checked again every few seconds: no new request."""
    admin = principal("platform-admin", tenant_id=None, key_id="k-admin", scopes=["admin:read"])
    for _ in range(10):
        await authorizer.permit(admin, roles=PLATFORM_ADMIN, scope="admin:read", method="GET")
    await authorizer.authorize(admin, roles=PLATFORM_ADMIN, scope="admin:read", method="GET")
    await authorizer.authorize(admin, roles=PLATFORM_ADMIN, scope="admin:read", method="GET")
    with pytest.raises(RateLimited):
        await authorizer.authorize(admin, roles=PLATFORM_ADMIN, scope="admin:read", method="GET")


async def test_a_refused_caller_spends_no_token(authorizer: Authorizer) -> None:
    admin = principal("platform-admin", tenant_id=None, key_id="k-admin")
    for _ in range(5):
        with pytest.raises(InsufficientScope):
            await authorizer.authorize(
                admin, roles=PLATFORM_ADMIN, scope="admin:write", method="GET"
            )
    for _ in range(2):
        await authorizer.rate_limit(admin)


async def test_a_platform_admins_token_without_a_key_is_not_limited(authorizer: Authorizer) -> None:
    signed_in = principal("platform-admin", tenant_id=None, key_id=None)
    for _ in range(20):
        await authorizer.rate_limit(signed_in)


def test_a_tenants_default_rate_limit_is_the_settings() -> None:
    assert default_rate_limit(GatewaySettings()) == RateLimit(requests_per_s=200.0, burst=400)
    custom = GatewaySettings(tenant_rate_limit_per_s=5.0, tenant_rate_limit_burst=7)
    assert default_rate_limit(custom) == RateLimit(requests_per_s=5.0, burst=7)
