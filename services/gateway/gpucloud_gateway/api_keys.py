"""API keys: `gpc_<key id>_<secret>`, the secret shown once and stored as its SHA-256.

A key never carries more than its creator: no higher role, no extra scope. A tenant
admin may mint one for a user of the tenant (`create_for`): no more than that user's
role, nor than the admin's own scopes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import cast

from gpucloud_libs.clock import aware, now
from gpucloud_libs.errors import Forbidden, NotFound, ValidationFailed
from gpucloud_libs.identity import Role
from gpucloud_libs.project_shares import is_member, unknown_project

from . import credentials
from .access_ends import AccessEnds
from .authorization import InsufficientScope
from .documents import ApiKeyDoc, UserDoc
from .identity_cache import IdentityCache
from .schemas import ALL_SCOPES, ApiKey, ApiKeyCreate, ApiKeyCreated, Principal
from .store import ApiKeyStore

_ROLE_RANK: dict[Role, int] = {"tenant-user": 1, "tenant-admin": 2, "platform-admin": 3}
DEFAULT_KEY_LIFETIME = timedelta(days=90)
MAX_KEY_LIFETIME = timedelta(days=366)
#: A key minted from a single sign-on: someone who left the provider loses it within
#: this, as they lose their sign-ins at once (review N7).
SSO_KEY_LIFETIME = timedelta(days=1)


def key_view(doc: ApiKeyDoc) -> ApiKey:
    return ApiKey(
        key_id=doc["_id"], name=doc["name"], user_id=doc.get("user_id"),
        tenant_id=doc.get("tenant_id"), role=doc["role"],
        scopes=doc.get("scopes") or list(ALL_SCOPES), created_at=doc["created_at"],
        expires_at=doc.get("expires_at"), revoked_at=doc.get("revoked_at"),
        last_used_at=doc.get("last_used_at"), service_ids=doc.get("service_ids"),
        created_by=doc.get("created_by"), project=doc.get("project"),
    )  # fmt: skip


@dataclass(frozen=True)
class _Holder:
    """Whose a key is: its user, tenant, the role it may have at most, and the
    inference services a machine key is limited to."""

    user_id: str | None
    tenant_id: str | None
    role: Role
    service_ids: list[str] | None


class ApiKeys:
    def __init__(self, keys: ApiKeyStore, cache: IdentityCache, access_ends: AccessEnds) -> None:
        self._keys = keys
        self._cache = cache
        self._access_ends = access_ends

    async def create(self, principal: Principal, body: ApiKeyCreate) -> ApiKeyCreated:
        """A key of the caller's own."""
        holder = _Holder(
            principal.user_id, principal.tenant_id, principal.role, principal.service_ids
        )
        return await self._mint(principal, body, holder)

    async def create_for(
        self, principal: Principal, user: UserDoc, body: ApiKeyCreate
    ) -> ApiKeyCreated:
        """A key of `user`'s, minted by an admin of its tenant (checked by the caller):
        the user's role at most, the admin's scopes at most."""
        if user["status"] != "active":
            raise ValidationFailed(f"user {user['email']!r} is {user['status']}: enable them first")
        holder = _Holder(user["_id"], user.get("tenant_id"), cast(Role, user["role"]), None)
        return await self._mint(principal, body, holder, created_by=principal.user_id)

    async def _mint(
        self, principal: Principal, body: ApiKeyCreate, holder: _Holder,
        created_by: str | None = None,
    ) -> ApiKeyCreated:  # fmt: skip
        project = await self._project(principal, body.project, holder)
        # A key of one project acts as a member alone. A machine key keeps its maker's
        # role: it is refused the whole API anyway (refuse_machine_key), and its role
        # decides which projects' services it reaches, as its maker's (decision 143).
        role = body.role or ("tenant-user" if project is not None else holder.role)
        if project is not None and role != "tenant-user":
            raise ValidationFailed(
                "a key of one project is a tenant-user key: it acts as a member of its "
                "project, and administers nothing of the tenant", field="role",
            )  # fmt: skip
        if _ROLE_RANK[role] > _ROLE_RANK[holder.role] or (
            (role == "platform-admin") != (holder.role == "platform-admin")
        ):
            raise Forbidden(f"a {holder.role} cannot hold a {role} key")
        scopes = body.scopes or list(principal.scopes)
        if body.service_ids is not None:
            if principal.tenant_id is None:
                raise ValidationFailed(
                    "inference services belong to tenants: a tenant makes their keys"
                )
            scopes = ["instances:connect"]
        service_ids = body.service_ids if body.service_ids is not None else holder.service_ids
        if extra := sorted(set(scopes) - set(principal.scopes)):
            raise InsufficientScope(f"your credential lacks the scopes {extra}", scopes=extra)
        at = now()
        if body.expires_at is not None and not at < body.expires_at <= at + MAX_KEY_LIFETIME:
            raise ValidationFailed("expiresAt must be in the future and at most a year away")
        # No key outlives what minted it, a key or a single sign-on's day (review N7): a
        # later end asked for is brought back to that one, which the answer shows.
        latest = at + (SSO_KEY_LIFETIME if principal.sso else MAX_KEY_LIFETIME)
        if principal.expires_at is not None:
            latest = min(latest, aware(principal.expires_at))
        expires_at = min(body.expires_at or at + DEFAULT_KEY_LIFETIME, latest)
        key_id, secret = credentials.new_api_key()
        doc: ApiKeyDoc = {
            "_id": key_id,
            "secret_hash": credentials.hash_api_key(secret),
            "name": body.name,
            "user_id": holder.user_id,
            "tenant_id": holder.tenant_id,
            "role": role,
            "scopes": sorted(set(scopes)),
            "created_at": at,
            "expires_at": expires_at,
            "revoked_at": None,
            "last_used_at": None,
            "service_ids": sorted(set(service_ids)) if service_ids is not None else None,
            "created_by": created_by,
            "project": project,
        }
        await self._keys.insert(doc)
        return ApiKeyCreated(**key_view(doc).model_dump(), secret=secret)

    async def _project(
        self, principal: Principal, asked: str | None, holder: _Holder
    ) -> str | None:
        """The one project the new key acts in: the one asked for, of which its holder is
        a member (a 404 otherwise, as for a project that is not: a tenant admin joins
        the project first); a key of one project makes keys of that project only."""
        if principal.project is not None:
            if asked not in (None, principal.project):
                raise Forbidden(f"this credential is for project {principal.project!r}; "
                                "its keys are too")  # fmt: skip
            asked = principal.project
        if asked is None:
            return None
        if holder.tenant_id is None:
            raise ValidationFailed("projects are a tenant's; a platform key names none")
        tenant = await self._cache.tenant(holder.tenant_id)
        projects = tenant.get("projects") if tenant is not None else None
        if not is_member(projects, asked, holder.user_id):
            seen = principal.projects is None or asked in principal.projects
            if asked not in (projects or {}) or not seen:
                raise unknown_project(asked, principal.projects)
            who = "you are" if holder.user_id == principal.user_id else "the key's user is"
            raise ValidationFailed(
                f"{who} not a member of project {asked!r}; a tenant admin adds members first",
                field="project",
            )
        return asked

    def _may_see_key(self, principal: Principal, doc: ApiKeyDoc) -> bool:
        if doc.get("tenant_id") != principal.tenant_id:
            return False
        # Admins see every key of their tenant (or of the platform); members their own.
        return principal.role != "tenant-user" or doc.get("user_id") == principal.user_id

    async def _key(self, principal: Principal, key_id: str) -> ApiKeyDoc:
        doc = await self._keys.get(key_id)
        if doc is None or not self._may_see_key(principal, doc):
            raise NotFound(f"API key {key_id!r} does not exist")
        return doc

    async def get(self, principal: Principal, key_id: str) -> ApiKey:
        return key_view(await self._key(principal, key_id))

    async def list(self, principal: Principal, *, after: str | None, limit: int) -> list[ApiKey]:
        only_user = principal.user_id if principal.role == "tenant-user" else None
        docs = await self._keys.page(
            tenant_id=principal.tenant_id, user_id=only_user, after=after, limit=limit
        )
        return [key_view(doc) for doc in docs]

    async def revoke(self, principal: Principal, key_id: str) -> ApiKey:
        await self._key(principal, key_id)
        doc = await self._keys.revoke(key_id)
        assert doc is not None
        self._cache.forget_keys(key_id)
        await self._end_minted([doc])
        return key_view(doc)

    async def revoke_where(self, *, end_access: bool = True, **match: str) -> None:
        """Revoke every key matching (a tenant's, a user's), effective at once here;
        with `end_access`, what they may have minted outside the gateway too (a deleted
        tenant's end with it anyway)."""
        revoked = await self._keys.revoke_where(**match)
        self._cache.forget_keys(*(doc["_id"] for doc in revoked))
        if end_access:
            await self._end_minted(revoked)

    async def _end_minted(self, revoked: Sequence[ApiKeyDoc]) -> None:
        """A kubectl credential a revoked key may have minted ends with it (review N4):
        its user's, who asks for one again with what still allows it."""
        holders = {(doc["user_id"], doc.get("tenant_id")) for doc in revoked if doc.get("user_id")}
        for user_id, tenant_id in sorted(holders, key=lambda holder: holder[0] or ""):
            assert user_id is not None
            await self._access_ends.end(user_id, tenant_id)

    async def end_for_user(self, user_id: str) -> None:
        """A user's access ended: their keys go, and the keys they minted for others
        with an admin's rights, which end with the admin who made them (review N6)."""
        await self.revoke_where(user_id=user_id)
        await self.revoke_where(created_by=user_id)
