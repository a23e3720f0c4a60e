"""All MongoDB access of the gateway.

Hot paths (authentication) read by `_id` only. Every document has one writer:
the gateway replica serving the request that changes it, with whole-field
`$set`s, so a lost update can only be a concurrent write of the same field,
where the last writer wins as it would anyway.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from datetime import datetime, timedelta
from typing import Any, Literal

from pymongo import ASCENDING, DESCENDING, IndexModel
from pymongo.errors import DuplicateKeyError

from gpucloud_libs.clock import aware, now
from gpucloud_libs.locks import LeasedLocks
from gpucloud_libs.mongo import Collection, Database, Document, IndexPlan, typed

from .documents import (
    ApiKeyDoc,
    AuditDoc,
    ConsoleSessionDoc,
    InvitationDoc,
    TenantDoc,
    UserDoc,
)

TENANTS = "tenants"
#: One document per tenant being changed (TenantStore.changing).
TENANT_LOCKS = "tenant_locks"
USERS = "users"
KEYS = "keys"
AUDIT = "audit"
CONSOLE_SESSIONS = "console_sessions"
SPENT_LINKS = "spent_session_links"
INVITATIONS = "invitations"
SSO_CONFIGS = "sso_configs"
SSO_LOGINS = "sso_logins"
SSO_DEVICES = "sso_devices"
SSO_IDENTITIES = "sso_identities"

#: The maps of a tenant's document whose entries change one by one.
TenantMap = Literal["user_limits", "projects"]

INDEXES: IndexPlan = {
    USERS: [
        IndexModel([("email", ASCENDING)], unique=True),
        IndexModel([("tenant_id", ASCENDING)]),
    ],
    KEYS: [IndexModel([("tenant_id", ASCENDING)]), IndexModel([("user_id", ASCENDING)])],
    AUDIT: [IndexModel([("tenant_id", ASCENDING), ("_id", DESCENDING)])],
    INVITATIONS: [
        IndexModel([("token_hash", ASCENDING)], unique=True),
        IndexModel([("tenant_id", ASCENDING)]),
    ],
    SSO_IDENTITIES: [IndexModel([("user_id", ASCENDING)])],
}


class AlreadyExists(Exception):
    pass


class TenantStore:
    def __init__(self, db: Database) -> None:
        self._tenants: Collection[TenantDoc] = typed(db, TENANTS, TenantDoc)
        self._locks = LeasedLocks(
            db[TENANT_LOCKS], ttl=timedelta(seconds=30), wait_s=10,
            busy="the tenant is being changed elsewhere; try again",
        )  # fmt: skip

    async def insert(self, document: TenantDoc) -> None:
        try:
            await self._tenants.insert_one(document)
        except DuplicateKeyError as error:
            raise AlreadyExists(document["_id"]) from error

    async def get(self, tenant_id: str) -> TenantDoc | None:
        return await self._tenants.find_one({"_id": tenant_id})

    async def remove_unpublished(self, tenant_id: str) -> None:
        """Undo a creation that failed before anyone was told of the tenant."""
        await self._tenants.delete_one({"_id": tenant_id, "published_revision": None})

    async def page(self, *, after: str | None, limit: int) -> list[TenantDoc]:
        query: dict[str, Any] = {"status": {"$ne": "deleted"}}
        if after:
            query["_id"] = {"$gt": after}
        return await self._tenants.find(query).sort("_id", ASCENDING).limit(limit).to_list()

    async def set_fields(self, tenant_id: str, fields: Document, revision: int) -> TenantDoc | None:
        """Change fields and move the tenant to a new revision, which is then published."""
        await self._tenants.update_one(
            {"_id": tenant_id}, {"$set": {**fields, "revision": revision, "updated_at": now()}}
        )
        return await self.get(tenant_id)

    def changing(self, tenant_id: str) -> AbstractAsyncContextManager[None]:
        """The tenant's change lock, across replicas: who holds it reads, writes and
        publishes the tenant alone (decision 145). FerretDB applies a conditional update
        as a read and a write, so a revision check cannot make two replicas take turns;
        the insert of a lock document can."""
        return self._locks.held(f"tenant:{tenant_id}")

    async def set_entry(
        self, tenant_id: str, field: TenantMap, key: str, value: Document | None, revision: int
    ) -> TenantDoc | None:
        """One entry of a map of the tenant (one user's limits, one project), under the
        tenant's change lock. None removes it."""
        path = f"{field}.{key}"
        stamp = {"revision": revision, "updated_at": now()}
        change = (
            {"$set": {path: value, **stamp}} if value else {"$unset": {path: ""}, "$set": stamp}
        )
        await self._tenants.update_one({"_id": tenant_id}, change)
        return await self.get(tenant_id)

    async def mark_published(self, tenant_id: str, revision: int) -> None:
        await self._tenants.update_one(
            {"_id": tenant_id, "revision": revision}, {"$set": {"published_revision": revision}}
        )

    async def unpublished(self, written_before: datetime | None = None) -> list[TenantDoc]:
        """Tenants whose latest revision is not published, among those last written
        before `written_before` (all when None)."""
        # Tenants are few (hundreds), and FerretDB cannot compare two fields in a filter.
        everything = await self._tenants.find({}).to_list()
        return [
            doc
            for doc in everything
            if doc.get("published_revision") != doc["revision"]
            and (written_before is None or aware(doc["updated_at"]) < written_before)
        ]


class UserStore:
    def __init__(self, db: Database) -> None:
        self._users: Collection[UserDoc] = typed(db, USERS, UserDoc)

    async def insert(self, document: UserDoc) -> None:
        try:
            await self._users.insert_one(document)
        except DuplicateKeyError as error:
            raise AlreadyExists(document["email"]) from error

    async def get(self, user_id: str) -> UserDoc | None:
        return await self._users.find_one({"_id": user_id})

    async def many(self, user_ids: list[str]) -> list[UserDoc]:
        """These users, in the order given (those that are gone left out)."""
        found = {u["_id"]: u async for u in self._users.find({"_id": {"$in": user_ids}})}
        return [found[user_id] for user_id in user_ids if user_id in found]

    async def by_email(self, email: str) -> UserDoc | None:
        return await self._users.find_one({"email": email})

    async def page(self, tenant_id: str | None, *, after: str | None, limit: int) -> list[UserDoc]:
        query: dict[str, Any] = {"tenant_id": tenant_id, "status": {"$ne": "deleted"}}
        if after:
            query["_id"] = {"$gt": after}
        return await self._users.find(query).sort("_id", ASCENDING).limit(limit).to_list()

    async def set_fields(self, user_id: str, fields: Document) -> UserDoc | None:
        await self._users.update_one({"_id": user_id}, {"$set": fields})
        return await self.get(user_id)

    async def access_ends_pending(self) -> list[UserDoc]:
        return await self._users.find({"access_end_pending": True}).to_list()

    async def names(self, user_ids: list[str], only_tenant: str | None) -> dict[str, str]:
        """Each of these users' names, by id (a deleted user's too); with `only_tenant`,
        of that tenant's users alone."""
        query: dict[str, Any] = {"_id": {"$in": user_ids}}
        if only_tenant is not None:
            query["tenant_id"] = only_tenant
        found = await self._users.find(query, {"name": 1}).to_list()
        return {doc["_id"]: doc["name"] for doc in found}

    async def delete(self, user_id: str) -> None:
        # The email is released for reuse; the id stays, so audit entries resolve.
        await self._users.update_one(
            {"_id": user_id},
            {"$set": {"status": "deleted", "email": f"deleted+{user_id}"}},
        )


class ApiKeyStore:
    def __init__(self, db: Database) -> None:
        self._keys: Collection[ApiKeyDoc] = typed(db, KEYS, ApiKeyDoc)

    async def insert(self, document: ApiKeyDoc) -> None:
        await self._keys.insert_one(document)

    async def get(self, key_id: str) -> ApiKeyDoc | None:
        return await self._keys.find_one({"_id": key_id})

    async def page(
        self, *, tenant_id: str | None, user_id: str | None, after: str | None, limit: int
    ) -> list[ApiKeyDoc]:
        query: dict[str, Any] = {"tenant_id": tenant_id}
        if user_id is not None:
            query["user_id"] = user_id
        if after:
            query["_id"] = {"$gt": after}
        return await self._keys.find(query).sort("_id", ASCENDING).limit(limit).to_list()

    async def names(self, key_ids: list[str], only_tenant: str | None) -> dict[str, str]:
        """Each of these keys' names, by id; with `only_tenant`, of that tenant's keys."""
        query: dict[str, Any] = {"_id": {"$in": key_ids}}
        if only_tenant is not None:
            query["tenant_id"] = only_tenant
        found = await self._keys.find(query, {"name": 1}).to_list()
        return {doc["_id"]: doc["name"] for doc in found}

    async def revoke(self, key_id: str) -> ApiKeyDoc | None:
        await self._keys.update_one(
            {"_id": key_id, "revoked_at": None}, {"$set": {"revoked_at": now()}}
        )
        return await self.get(key_id)

    async def revoke_where(self, **match: str) -> list[ApiKeyDoc]:
        """Revoke every live key matching, e.g. a user's or a tenant's; returns them."""
        live = await self._keys.find({**match, "revoked_at": None}).to_list()
        ids = [doc["_id"] for doc in live]
        if ids:
            await self._keys.update_many({"_id": {"$in": ids}}, {"$set": {"revoked_at": now()}})
        return live

    async def touch(self, key_id: str, at: datetime) -> None:
        await self._keys.update_one({"_id": key_id}, {"$set": {"last_used_at": at}})

    async def upsert_bootstrap(self, key_id: str, secret_hash: str) -> None:
        """Install or rotate the bootstrap key, unless an operator revoked it."""
        existing = await self.get(key_id)
        if existing is None:
            await self._keys.insert_one(
                {
                    "_id": key_id,
                    "secret_hash": secret_hash,
                    "name": "bootstrap platform admin",
                    "user_id": None,
                    "tenant_id": None,
                    "role": "platform-admin",
                    "scopes": None,
                    "created_at": now(),
                    "expires_at": None,
                    "revoked_at": None,
                    "last_used_at": None,
                }
            )
        elif existing.get("revoked_at") is None and existing["secret_hash"] != secret_hash:
            await self._keys.update_one({"_id": key_id}, {"$set": {"secret_hash": secret_hash}})


class ConsoleSessionStore:
    """Read by `_id` on every console request; written at sign-in and sign-out."""

    def __init__(self, db: Database) -> None:
        self._sessions: Collection[ConsoleSessionDoc] = typed(
            db, CONSOLE_SESSIONS, ConsoleSessionDoc
        )

    async def insert(self, document: ConsoleSessionDoc) -> None:
        await self._sessions.insert_one(document)

    async def get(self, session_hash: str) -> ConsoleSessionDoc | None:
        return await self._sessions.find_one({"_id": session_hash})

    async def delete(self, session_hash: str) -> None:
        await self._sessions.delete_one({"_id": session_hash})

    async def delete_expired(self, before: datetime) -> int:
        result = await self._sessions.delete_many({"expires_at": {"$lt": before}})
        return result.deleted_count


class SpentLinkStore:
    """Session links already opened, by digest, until they would have expired anyway:
    a link is good once (review L9), on whichever replica it is opened."""

    def __init__(self, db: Database) -> None:
        self._links: Collection[Document] = db[SPENT_LINKS]

    async def spend(self, digest: str, expires_at: datetime) -> bool:
        """Record the link as opened; False if it already was."""
        try:
            await self._links.insert_one({"_id": digest, "expires_at": expires_at})
        except DuplicateKeyError:
            return False
        return True

    async def delete_expired(self, before: datetime) -> int:
        result = await self._links.delete_many({"expires_at": {"$lt": before}})
        return result.deleted_count


class AuditStore:
    def __init__(self, db: Database) -> None:
        self._audit: Collection[AuditDoc] = typed(db, AUDIT, AuditDoc)

    async def insert(self, document: AuditDoc) -> None:
        await self._audit.insert_one(document)

    async def get(self, audit_id: str) -> AuditDoc | None:
        return await self._audit.find_one({"_id": audit_id})

    async def mark_published(self, audit_id: str) -> None:
        await self._audit.update_one({"_id": audit_id}, {"$set": {"published": True}})

    async def unpublished(self, limit: int = 500) -> list[AuditDoc]:
        return await self._audit.find({"published": False}).limit(limit).to_list()

    async def page(
        self,
        *,
        tenant_id: str | None,
        all_tenants: bool,
        before: str | None,
        since: datetime | None,
        limit: int,
    ) -> list[AuditDoc]:
        query: dict[str, Any] = {} if all_tenants else {"tenant_id": tenant_id}
        if before:
            query["_id"] = {"$lt": before}
        if since:
            query["at"] = {"$gte": since}
        return await self._audit.find(query).sort("_id", DESCENDING).limit(limit).to_list()


class InvitationStore:
    def __init__(self, db: Database) -> None:
        self._invitations: Collection[InvitationDoc] = typed(db, INVITATIONS, InvitationDoc)

    async def insert(self, doc: InvitationDoc) -> None:
        await self._invitations.insert_one(doc)

    async def get(self, invitation_id: str) -> InvitationDoc | None:
        return await self._invitations.find_one({"_id": invitation_id})

    async def by_token_hash(self, token_hash: str) -> InvitationDoc | None:
        return await self._invitations.find_one({"token_hash": token_hash})

    async def of_tenant(self, tenant_id: str) -> list[InvitationDoc]:
        found = await self._invitations.find({"tenant_id": tenant_id}).to_list()
        return sorted(found, key=lambda doc: aware(doc["created_at"]), reverse=True)

    async def end(self, invitation_id: str, status: str, **fields: Any) -> bool:
        """Move a pending invitation to `status`; False when it was not pending."""
        change = {"status": status, "ended_at": now(), **fields}
        ended = await self._invitations.update_one(
            {"_id": invitation_id, "status": "pending"}, {"$set": change}
        )
        return ended.modified_count == 1

    async def record_user(self, invitation_id: str, user_id: str) -> None:
        await self._invitations.update_one({"_id": invitation_id}, {"$set": {"user_id": user_id}})

    async def reopen(self, invitation_id: str) -> None:
        """An acceptance that made no user: the invitation is pending again."""
        await self._invitations.update_one(
            {"_id": invitation_id}, {"$set": {"status": "pending"}, "$unset": {"ended_at": ""}}
        )
