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
from gpucloud_libs.errors import Conflict, Unauthenticated

from .authentication import Authenticator
from .documents import SsoConfigDoc, UserDoc
from .oidc import SignInRefused
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


def role_of(config: SsoConfigDoc, claims: dict[str, Any]) -> str:
    """The highest role the user's groups map to, else the tenant's default."""
    groups = claims.get("groups")
    names = [g for g in groups if isinstance(g, str)] if isinstance(groups, list) else []
    roles = [config["group_roles"][g] for g in names if g in config["group_roles"]]
    role = max(roles, key=ROLE_RANK.__getitem__) if roles else config["default_role"]
    if role is None:
        raise SignInRefused("no group of the user has a role in the tenant")
    return role


class SsoAccounts:
    def __init__(
        self, store: SsoStore, users: Users, user_store: UserStore, authenticator: Authenticator
    ) -> None:
        self._store = store
        self._users = users
        self._user_store = user_store
        self._authenticator = authenticator

    async def tenant_active(self, tenant_id: str) -> bool:
        try:
            await self._authenticator.check_tenant(tenant_id)
        except Unauthenticated:
            return False
        return True

    async def user_of(self, config: SsoConfigDoc, claims: dict[str, Any]) -> UserDoc:
        """The active user of the config's tenant the claims name, with the role their
        groups give now (made, or linked by verified email, on a first sign-in)."""
        if not await self.tenant_active(config["_id"]):
            raise SignInRefused("the tenant was deleted")
        role = role_of(config, claims)
        linked_id = identity_id(config["_id"], config["issuer"], str(claims["sub"]))
        linked = await self._store.identity(linked_id)
        user = await self._user_store.get(linked["user_id"]) if linked else None
        if linked is not None and (user is None or user["status"] == "deleted"):
            await self._store.unlink(linked_id)  # the user was removed: a new link may form
            user = None
        if user is None:
            user = await self._first_sign_in(config, claims, role, linked_id)
        if user.get("tenant_id") != config["_id"] or user["status"] != "active":
            raise SignInRefused("the user is not an active user of the tenant")
        if user["role"] != role:
            user = await self._users.change_role(user, role)
        return user

    async def _first_sign_in(
        self, config: SsoConfigDoc, claims: dict[str, Any], role: str, linked_id: str
    ) -> UserDoc:
        email = claims.get("email")
        if not isinstance(email, str) or claims.get("email_verified") is not True:
            raise SignInRefused("the ID token has no verified email")
        email = email.lower()
        user = await self._user_store.by_email(email)
        if user is not None:
            if user.get("tenant_id") != config["_id"]:
                raise SignInRefused("the email is a user of another tenant")
            if await self._store.identity_of_user(user["_id"], config["issuer"]):
                raise SignInRefused("the user is linked to another account of the provider")
        elif not config["create_users"]:
            raise SignInRefused("the email is not a user and the tenant makes none")
        else:
            user = await self._made(config, claims, email, role)
        try:
            await self._store.link({
                "_id": linked_id, "user_id": user["_id"], "tenant_id": config["_id"],
                "issuer": config["issuer"], "subject": str(claims["sub"]), "linked_at": now(),
            })  # fmt: skip
        except AlreadyExists:
            raise SignInRefused("a concurrent sign-in linked this account") from None
        return user

    async def _made(
        self, config: SsoConfigDoc, claims: dict[str, Any], email: str, role: str
    ) -> UserDoc:
        name = claims.get("name")
        shown = name.strip()[:NAME_MAX] if isinstance(name, str) and name.strip() else email
        try:
            body = UserCreate(email=email, name=shown[:NAME_MAX], role=role)
        except ValidationError:
            raise SignInRefused("the ID token's email is not one this platform takes") from None
        try:
            made = await self._users.insert(body, tenant_id=config["_id"])
        except Conflict:
            raise SignInRefused("a concurrent sign-in made this user") from None
        user = await self._user_store.get(made.user_id)
        if user is None:
            raise SignInRefused("the user made was removed at once")
        return user
