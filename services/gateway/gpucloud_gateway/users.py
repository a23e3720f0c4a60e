"""Users: platform admins, and each tenant's admins and members, with optional passwords
(scrypt hashes). Disabling a user or changing their role revokes their keys."""

from __future__ import annotations

import asyncio
import logging
import secrets

from gpucloud_libs.clock import now
from gpucloud_libs.errors import Conflict, Forbidden, NotFound, ValidationFailed
from gpucloud_libs.identity import Role
from gpucloud_libs.mongo import Document

from . import credentials
from .access_ends import AccessEnds
from .api_keys import ApiKeys
from .documents import UserDoc
from .identity_cache import IdentityCache
from .schemas import ApiKeyCreate, ApiKeyCreated, Principal, User, UserCreate, UserUpdate
from .store import AlreadyExists, UserStore

log = logging.getLogger(__name__)


def user_view(doc: UserDoc) -> User:
    return User(
        user_id=doc["_id"], tenant_id=doc.get("tenant_id"), email=doc["email"],
        name=doc["name"], role=doc["role"], status=doc["status"],
        has_password=bool(doc.get("password_hash")), created_at=doc["created_at"],
    )  # fmt: skip


def check_assignable(principal: Principal, role: Role) -> None:
    """Platform admins manage platform admins; tenant admins their tenant's members."""
    allowed: set[Role] = (
        {"platform-admin"} if principal.tenant_id is None else {"tenant-admin", "tenant-user"}
    )
    if role not in allowed:
        raise Forbidden(f"you can give users the roles: {', '.join(sorted(allowed))}")


async def _hashed(password: str) -> str:
    """scrypt, off the event loop: it takes tens of milliseconds on purpose."""
    return await asyncio.to_thread(credentials.hash_password, password)


class Users:
    def __init__(
        self, users: UserStore, cache: IdentityCache, api_keys: ApiKeys, access_ends: AccessEnds
    ) -> None:
        self._users = users
        self._cache = cache
        self._api_keys = api_keys
        self._access_ends = access_ends

    async def insert(self, body: UserCreate, *, tenant_id: str | None) -> User:
        doc: UserDoc = {
            "_id": f"u-{secrets.token_hex(8)}",
            "tenant_id": tenant_id,
            "email": body.email.lower(),
            "name": body.name,
            "role": body.role,
            "status": "active",
            "password_hash": await _hashed(body.password.get_secret_value())
            if body.password
            else None,
            "created_at": now(),
        }
        try:
            await self._users.insert(doc)
        except AlreadyExists as error:
            raise Conflict(f"a user with the email {body.email!r} already exists") from error
        return user_view(doc)

    async def create(self, principal: Principal, body: UserCreate) -> User:
        check_assignable(principal, body.role)
        return await self.insert(body, tenant_id=principal.tenant_id)

    async def add_to_tenant(self, tenant_id: str, body: UserCreate) -> User:
        """A platform admin adds a member to a tenant: its admin or a user, never an operator."""
        if body.role == "platform-admin":
            message = "a tenant's users are tenant-admin or tenant-user"
            raise ValidationFailed(
                message, errors=[{"loc": ["body", "role"], "msg": message, "type": "value_error"}]
            )
        return await self.insert(body, tenant_id=tenant_id)

    async def of_tenant(
        self, tenant_id: str | None, *, after: str | None, limit: int
    ) -> list[User]:
        """A tenant's users; None: the platform admins."""
        docs = await self._users.page(tenant_id, after=after, limit=limit)
        return [user_view(doc) for doc in docs]

    async def _user(self, principal: Principal, user_id: str) -> UserDoc:
        doc = await self._users.get(user_id)
        if doc is None or doc["status"] == "deleted" or doc.get("tenant_id") != principal.tenant_id:
            raise NotFound(f"user {user_id!r} does not exist")
        return doc

    async def get(self, principal: Principal, user_id: str) -> User:
        return user_view(await self._user(principal, user_id))

    async def mint_key(
        self, principal: Principal, user_id: str, body: ApiKeyCreate
    ) -> ApiKeyCreated:
        """An API key for a user of the admin's tenant (or, for a platform admin, of
        the platform): the user need not sign in to get one."""
        return await self._api_keys.create_for(
            principal, await self._user(principal, user_id), body
        )

    async def list(self, principal: Principal, *, after: str | None, limit: int) -> list[User]:
        return await self.of_tenant(principal.tenant_id, after=after, limit=limit)

    async def update(self, principal: Principal, user_id: str, body: UserUpdate) -> User:
        doc = await self._user(principal, user_id)
        if user_id == principal.user_id and (body.role or body.status):
            raise ValidationFailed("you cannot change your own role or status; ask another admin")
        fields: Document = body.model_dump(exclude_unset=True, exclude={"password"})
        if body.role is not None:
            check_assignable(principal, body.role)
        if body.password is not None:
            fields["password_hash"] = await _hashed(body.password.get_secret_value())
            # Ends the tokens and console sessions signed in with the old password.
            fields["credentials_version"] = doc.get("credentials_version", 0) + 1
        changed = body.status == "disabled" or bool(body.role and body.role != doc["role"])
        updated = await self._changed(doc, fields, end_keys=changed)
        if body.password is not None and not changed:
            # A new password ends what the old one could have let anyone mint (N4).
            await self._end_access(updated)
        return user_view(updated)

    async def change_role(self, doc: UserDoc, role: str) -> UserDoc:
        """The role the user's provider groups now give them (single sign-on): their
        keys go, as for any change of role."""
        return await self._changed(doc, {"role": role}, end_keys=True)

    async def _changed(self, doc: UserDoc, fields: Document, *, end_keys: bool) -> UserDoc:
        """The user with `fields` written, forgotten by the cache; with `end_keys`, their
        keys revoked and their kubectl credentials ended (keys carry the role they were
        minted with, and a tenant admin's credential reaches projects a user's does not:
        a changed user starts afresh)."""
        updated = await self._users.set_fields(doc["_id"], fields)
        assert updated is not None
        self._cache.forget_user(doc["_id"])
        if end_keys:
            await self._api_keys.end_for_user(doc["_id"])
            await self._end_access(updated)
        return updated

    async def delete(self, principal: Principal, user_id: str) -> None:
        doc = await self._user(principal, user_id)
        if user_id == principal.user_id:
            raise ValidationFailed("you cannot delete yourself; ask another admin")
        await self._users.delete(user_id)
        self._cache.forget_user(user_id)
        await self._api_keys.end_for_user(user_id)
        await self._end_access(doc)

    async def _end_access(self, doc: UserDoc) -> None:
        """Tell the services the user's access ended (their kubectl credential goes)."""
        await self._access_ends.end(doc["_id"], doc.get("tenant_id"))
