"""Single sign-on's documents: each tenant's provider, sign-ins under way (a
browser's and a CLI's), and the provider accounts linked to users."""

from __future__ import annotations

from datetime import datetime

from pymongo.errors import DuplicateKeyError

from gpucloud_libs.mongo import Collection, Database, typed

from .documents import SsoConfigDoc, SsoDeviceDoc, SsoIdentityDoc, SsoLoginDoc
from .store import SSO_CONFIGS, SSO_DEVICES, SSO_IDENTITIES, SSO_LOGINS, AlreadyExists


class SsoStore:
    def __init__(self, db: Database) -> None:
        self._configs: Collection[SsoConfigDoc] = typed(db, SSO_CONFIGS, SsoConfigDoc)
        self._logins: Collection[SsoLoginDoc] = typed(db, SSO_LOGINS, SsoLoginDoc)
        self._devices: Collection[SsoDeviceDoc] = typed(db, SSO_DEVICES, SsoDeviceDoc)
        self._identities: Collection[SsoIdentityDoc] = typed(db, SSO_IDENTITIES, SsoIdentityDoc)

    async def put(self, doc: SsoConfigDoc) -> None:
        await self._configs.replace_one({"_id": doc["_id"]}, doc, upsert=True)

    async def config(self, tenant_id: str) -> SsoConfigDoc | None:
        return await self._configs.find_one({"_id": tenant_id})

    async def delete(self, tenant_id: str) -> bool:
        return (await self._configs.delete_one({"_id": tenant_id})).deleted_count == 1

    async def begin(self, doc: SsoLoginDoc) -> None:
        await self._logins.insert_one(doc)

    async def take(self, state_hash: str) -> SsoLoginDoc | None:
        """The sign-in of this state, once: the one that deletes it gets it."""
        doc = await self._logins.find_one({"_id": state_hash})
        if doc is None or (await self._logins.delete_one({"_id": state_hash})).deleted_count != 1:
            return None
        return doc

    async def delete_expired(self, at: datetime) -> None:
        await self._logins.delete_many({"expires_at": {"$lt": at}})
        await self._devices.delete_many({"expires_at": {"$lt": at}})

    async def begin_device(self, doc: SsoDeviceDoc) -> None:
        await self._devices.insert_one(doc)

    async def device(self, poll_hash: str) -> SsoDeviceDoc | None:
        return await self._devices.find_one({"_id": poll_hash})

    async def claim_device_poll(self, poll_hash: str, at: datetime, next_at: datetime) -> bool:
        """Claim this poll: False when the next is due later (the CLI polled too soon,
        or two pollers race)."""
        claimed = await self._devices.update_one(
            {"_id": poll_hash, "next_poll_at": {"$lte": at}}, {"$set": {"next_poll_at": next_at}}
        )
        return claimed.modified_count == 1

    async def slow_device(self, poll_hash: str, next_at: datetime, interval_s: int) -> None:
        await self._devices.update_one(
            {"_id": poll_hash}, {"$set": {"next_poll_at": next_at, "interval_s": interval_s}}
        )

    async def end_device(self, poll_hash: str) -> bool:
        return (await self._devices.delete_one({"_id": poll_hash})).deleted_count == 1

    async def identity(self, identity_id: str) -> SsoIdentityDoc | None:
        return await self._identities.find_one({"_id": identity_id})

    async def identity_of_user(self, user_id: str, issuer: str) -> SsoIdentityDoc | None:
        return await self._identities.find_one({"user_id": user_id, "issuer": issuer})

    async def link(self, doc: SsoIdentityDoc) -> None:
        """Raises AlreadyExists when the provider's account is linked already."""
        try:
            await self._identities.insert_one(doc)
        except DuplicateKeyError as error:
            raise AlreadyExists(doc["_id"]) from error

    async def unlink(self, identity_id: str) -> None:
        await self._identities.delete_one({"_id": identity_id})
