"""Which user a provider's ID token names, in the tenant whose provider vouched.

A provider's account is linked to one user by its issuer and `sub`, which never
change. An account not linked yet is matched by email only when the provider says
the email is verified (`email_verified: true`, never assumed), and only to a user of
the same tenant: a tenant's provider vouches for its own tenant and no other. A
first sign-in makes the user when the tenant allows it.
"""

from __future__ import annotations

import hashlib
from typing import Any

from pydantic import ValidationError

from gpucloud_libs.clock import now
from gpucloud_libs.errors import Conflict, Gone, Unauthenticated

from .authentication import Authenticator
from .documents import SsoConfigDoc, UserDoc
from .invitations import Invitations
from .oidc import SignInRefused
from .project_schemas import ProjectMemberships
from .schemas import UserCreate
from .sso_store import SsoStore
from .store import AlreadyExists, UserStore
from .users import Users

#: A user's groups give them the highest of these their mapping names.
ROLE_RANK = {"tenant-user": 1, "tenant-admin": 2}
NAME_MAX = 128


def identity_id(tenant_id: str, issuer: str, subject: str) -> str:
    """Per tenant: two tenants trusting one issuer (a public provider) link its
    accounts each to their own users, and neither's link blocks the other's."""
    return hashlib.sha256(f"{tenant_id}\n{issuer}\n{subject}".encode()).hexdigest()


def role_of(config: SsoConfigDoc, claims: dict[str, Any], held: str | None) -> str:
    """The role a sign-in gives: the highest the user's groups map to, else the
    tenant's default. A tenant that maps no group at all leaves roles to gpucloud: the
    user keeps the role they `held` (an admin's choice, or an invitation's). A tenant
    that maps groups refuses a user none of whose groups is mapped, so taking someone
    out of a group at the provider takes their access."""
    roles = [config["group_roles"][g] for g in _groups(claims) if g in config["group_roles"]]
    if roles:
        return max(roles, key=ROLE_RANK.__getitem__)
    role = config["default_role"] or (None if config["group_roles"] else held)
    if role is None:
        raise SignInRefused("no group of the user has a role in the tenant")
    return role


def projects_of(config: SsoConfigDoc, claims: dict[str, Any]) -> tuple[set[str], set[str]]:
    """The projects the user's groups map to, and every project a group maps to: the
    user leaves those of the second their groups no longer give, and keeps the
    projects no group maps (an admin's to give)."""
    mapping = config.get("group_projects") or {}
    joined = {project for group in _groups(claims) for project in mapping.get(group, [])}
    return joined, {project for projects in mapping.values() for project in projects}


def _groups(claims: dict[str, Any]) -> list[str]:
    groups = claims.get("groups")
    return [g for g in groups if isinstance(g, str)] if isinstance(groups, list) else []


def verified_email(claims: dict[str, Any]) -> str:
    """The email the provider vouches for: `email_verified` must say so, never assumed."""
    email = claims.get("email")
    if not isinstance(email, str) or claims.get("email_verified") is not True:
        raise SignInRefused("the ID token has no verified email")
    return email.lower()


def display_name(claims: dict[str, Any], email: str) -> str:
    name = claims.get("name")
    return name.strip()[:NAME_MAX] if isinstance(name, str) and name.strip() else email[:NAME_MAX]


class SsoAccounts:
    def __init__(
        self, store: SsoStore, users: Users, user_store: UserStore, authenticator: Authenticator,
        invitations: Invitations, memberships: ProjectMemberships,
    ) -> None:  # fmt: skip
        self.memberships = memberships
        self._store = store
        self._users = users
        self._user_store = user_store
        self._authenticator = authenticator
        self._invitations = invitations

    async def tenant_active(self, tenant_id: str) -> bool:
        try:
            await self._authenticator.check_tenant(tenant_id)
        except Unauthenticated:
            return False
        return True

    async def user_of(
        self, config: SsoConfigDoc, claims: dict[str, Any], invitation_id: str | None = None
    ) -> UserDoc:
        """The active user of the config's tenant the claims name, with the role their
        groups give now (made, linked by verified email, or made by the invitation the
        sign-in began from, on a first sign-in)."""
        if not await self.tenant_active(config["_id"]):
            raise SignInRefused("the tenant was deleted")
        linked_id = identity_id(config["_id"], config["issuer"], str(claims["sub"]))
        linked = await self._store.identity(linked_id)
        user = await self._user_store.get(linked["user_id"]) if linked else None
        if linked is not None and (user is None or user["status"] == "deleted"):
            await self._store.unlink(linked_id)  # the user was removed: a new link may form
            user = None
        if user is None:
            user = await self._first_sign_in(config, claims, linked_id, invitation_id)
        elif invitation_id is not None:
            raise SignInRefused("the provider's account is a user already")
        if user.get("tenant_id") != config["_id"] or user["status"] != "active":
            raise SignInRefused("the user is not an active user of the tenant")
        role = role_of(config, claims, held=user["role"])
        if user["role"] != role:
            user = await self._users.change_role(user, role)
        if config.get("group_projects"):
            joined, mapped = projects_of(config, claims)
            await self.memberships.set_membership(
                config["_id"], user["_id"], join=joined, leave=mapped
            )
        return user

    async def _first_sign_in(
        self, config: SsoConfigDoc, claims: dict[str, Any], linked_id: str,
        invitation_id: str | None,
    ) -> UserDoc:  # fmt: skip
        email = verified_email(claims)
        user = await self._user_store.by_email(email)
        if user is not None:
            if invitation_id is not None:
                raise SignInRefused("the invited email is a user already")
            if user.get("tenant_id") != config["_id"]:
                raise SignInRefused("the email is a user of another tenant")
            if await self._store.identity_of_user(user["_id"], config["issuer"]):
                raise SignInRefused("the user is linked to another account of the provider")
        elif invitation_id is not None:
            user = await self._invited(config, claims, email, invitation_id)
        elif not config["create_users"]:
            raise SignInRefused("the email is not a user and the tenant makes none")
        else:
            user = await self._made(config, email, display_name(claims, email),
                                    role_of(config, claims, held=None))  # fmt: skip
        try:
            await self._store.link({
                "_id": linked_id, "user_id": user["_id"], "tenant_id": config["_id"],
                "issuer": config["issuer"], "subject": str(claims["sub"]), "linked_at": now(),
            })  # fmt: skip
        except AlreadyExists:
            raise SignInRefused("a concurrent sign-in linked this account") from None
        return user

    async def _invited(
        self, config: SsoConfigDoc, claims: dict[str, Any], email: str, invitation_id: str
    ) -> UserDoc:
        """The user an invitation makes, when the provider vouches for its email (the
        tenant's `create_users` aside: an admin invited them)."""
        invitation = await self._invitations.invitation(invitation_id)
        if invitation is None or invitation["tenant_id"] != config["_id"]:
            raise SignInRefused("the invitation is gone")
        if invitation["email"] != email:
            raise SignInRefused("the provider's email is not the invited one")
        role_of(config, claims, held=invitation["role"])  # refused before the link is spent
        try:
            made = await self._invitations.accept_signed_in(
                invitation_id, display_name(claims, email)
            )
        except (Gone, Conflict) as ended:
            raise SignInRefused(f"the invitation cannot be accepted: {ended.detail}") from None
        return await self._stored(made.user_id)

    async def _made(self, config: SsoConfigDoc, email: str, name: str, role: str) -> UserDoc:
        try:
            body = UserCreate(email=email, name=name, role=role)
        except ValidationError:
            raise SignInRefused("the ID token's email is not one this platform takes") from None
        try:
            made = await self._users.insert(body, tenant_id=config["_id"])
        except Conflict:
            raise SignInRefused("a concurrent sign-in made this user") from None
        return await self._stored(made.user_id)

    async def _stored(self, user_id: str) -> UserDoc:
        user = await self._user_store.get(user_id)
        if user is None:
            raise SignInRefused("the user made was removed at once")
        return user
