"""The gateway's routes for a tenant admin's work on the tenant's members beyond the
user record itself: their own limits (and their removal, which takes the limits off),
and invitations, with the two routes the invited person uses before they have any
credential: the invitation's preview and its acceptance."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request, Response, status

from gpucloud_libs.http import app_part

from .access import SessionsPart, require
from .invitations import Invitations
from .projects import Projects
from .routes import ADMINS, TENANT_ADMIN
from .schemas import (
    Invitation,
    InvitationAcceptance,
    InvitationCreate,
    InvitationCreated,
    InvitationPreview,
    InvitationToken,
    Principal,
    User,
    UserLimits,
)
from .tenants import Tenants
from .users import Users

router = APIRouter(prefix="/v1")

TenantsPart = Annotated[Tenants, app_part(Tenants)]
ProjectsPart = Annotated[Projects, app_part(Projects)]
UsersPart = Annotated[Users, app_part(Users)]
InvitationsPart = Annotated[Invitations, app_part(Invitations)]
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
    projects: ProjectsPart,
    principal: Annotated[Principal, require(ADMINS, "admin:write")],
) -> Response:
    await users.delete(principal, user_id)
    if principal.tenant_id is not None:
        await tenants.forget_user_limits(principal.tenant_id, user_id)
        await projects.forget_user(principal.tenant_id, user_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


# --- invitations ------------------------------------------------------------------------


@router.post(
    "/invitations",
    tags=["users"],
    status_code=status.HTTP_201_CREATED,
    summary="Invite an email to your tenant with a role (tenant admin); the link's secret "
    "is in this answer only",
)
async def create_invitation(
    body: InvitationCreate,
    invitations: InvitationsPart,
    principal: Annotated[Principal, require(TENANT_ADMIN, "admin:write")],
) -> InvitationCreated:
    return await invitations.create(principal, body)


@router.get("/invitations", tags=["users"], summary="Your tenant's invitations (tenant admin)")
async def list_invitations(
    invitations: InvitationsPart,
    principal: Annotated[Principal, require(TENANT_ADMIN, "admin:read")],
) -> list[Invitation]:
    return await invitations.list(principal)


@router.delete(
    "/invitations/{invitation_id}",
    tags=["users"],
    status_code=status.HTTP_204_NO_CONTENT,
    summary="Revoke an invitation: its link stops working at once (tenant admin)",
)
async def revoke_invitation(
    invitation_id: Annotated[str, Path(max_length=64)],
    invitations: InvitationsPart,
    principal: Annotated[Principal, require(TENANT_ADMIN, "admin:write")],
) -> Response:
    await invitations.revoke(principal, invitation_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post(
    "/invitations/preview",
    tags=["users"],
    summary="What an invitation link offers (no credential: the link's secret is one)",
)
async def preview_invitation(
    body: InvitationToken, request: Request, invitations: InvitationsPart, sessions: SessionsPart
) -> InvitationPreview:
    sessions.limit_sign_ins(request)  # per client address, as sign-ins (review L5)
    return await invitations.preview(body.token)


@router.post(
    "/invitations/accept",
    tags=["users"],
    status_code=status.HTTP_201_CREATED,
    summary="Accept an invitation with a name and a password: you are its user, and sign "
    "in with them (no credential: the link's secret is one; it works once)",
)
async def accept_invitation(
    body: InvitationAcceptance, request: Request, invitations: InvitationsPart,
    sessions: SessionsPart,
) -> User:  # fmt: skip
    sessions.limit_sign_ins(request)  # per client address, as sign-ins (review L5)
    return await invitations.accept(body)
