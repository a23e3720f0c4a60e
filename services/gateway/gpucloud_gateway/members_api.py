"""The gateway's routes for a tenant admin's work on the tenant's members beyond the
user record itself: their own limits (and their removal, which takes the limits off)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response, status

from gpucloud_libs.http import app_part

from .access import require
from .routes import ADMINS, TENANT_ADMIN
from .schemas import Principal, UserLimits
from .tenants import Tenants
from .users import Users

router = APIRouter(prefix="/v1")

TenantsPart = Annotated[Tenants, app_part(Tenants)]
UsersPart = Annotated[Users, app_part(Users)]
UserIdPath = Annotated[str, Path(max_length=64)]


@router.get("/users/{user_id}/limits", tags=["users"], summary="A user's own limits")
async def get_user_limits(
    user_id: UserIdPath,
    users: UsersPart,
    tenants: TenantsPart,
    principal: Annotated[Principal, require(TENANT_ADMIN, "admin:read")],
) -> UserLimits:
    await users.get(principal, user_id)  # a 404 outside the admin's tenant
    assert principal.tenant_id is not None
    tenant = await tenants.get(principal.tenant_id)
    return tenant.user_limits.get(user_id, UserLimits())


@router.put(
    "/users/{user_id}/limits",
    tags=["users"],
    summary="Limit a user's GPUs at once and spend per month, within the tenant's quota "
    "(tenant admin); enforced when their workloads are admitted",
)
async def set_user_limits(
    user_id: UserIdPath,
    body: UserLimits,
    tenants: TenantsPart,
    principal: Annotated[Principal, require(TENANT_ADMIN, "admin:write")],
) -> UserLimits:
    return await tenants.set_user_limits(principal, user_id, body)


@router.delete(
    "/users/{user_id}",
    tags=["users"],
    status_code=status.HTTP_204_NO_CONTENT,
    summary="Remove a user and revoke their keys",
)
async def delete_user(
    user_id: UserIdPath,
    users: UsersPart,
    tenants: TenantsPart,
    principal: Annotated[Principal, require(ADMINS, "admin:write")],
) -> Response:
    await users.delete(principal, user_id)
    if principal.tenant_id is not None:
        await tenants.forget_user_limits(principal.tenant_id, user_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
