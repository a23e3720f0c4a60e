"""Accessors: S3 credentials scoped to one object storage's bucket, read-only or read-write.

The secret is shown once, at creation; the backend enforces the scope, and a
revocation takes effect at once. Instances get accessors of their own through
their attachments, revoked when the instance ends.
"""

from __future__ import annotations

import secrets
import string
from datetime import datetime, timedelta

from gpucloud_libs.clock import now
from gpucloud_libs.errors import Conflict, NotFound, ValidationFailed
from gpucloud_libs.identity import Identity

from .backend import AccessMode, ObjectBackend
from .documents import AccessorDoc, StorageDoc
from .ownership import OwnedStorages
from .schemas import Accessor, AccessorCreate, AccessorCreated
from .store import AccessorStore

#: MinIO's bounds for a service account's expiry (RGW has none; same rule for both).
MIN_ACCESSOR_LIFETIME = timedelta(minutes=15)
MAX_ACCESSOR_LIFETIME = timedelta(days=365)
_KEY_ALPHABET = string.ascii_uppercase + string.digits


def access_key() -> str:
    """20 characters, like an AWS access key id; it doubles as the accessor's id."""
    return "GPC" + "".join(secrets.choice(_KEY_ALPHABET) for _ in range(17))


def accessor_view(doc: AccessorDoc) -> Accessor:
    return Accessor(
        accessor_id=doc["_id"],
        storage_id=doc["storage_id"],
        name=doc.get("name"),
        mode=doc["mode"],
        expires_at=doc.get("expires_at"),
        instance_id=doc.get("instance_id"),
        created_at=doc["created_at"],
    )


class Accessors:
    def __init__(
        self, backend: ObjectBackend, accessors: AccessorStore, owned: OwnedStorages
    ) -> None:
        self._backend = backend
        self._accessors = accessors
        self._owned = owned

    async def create(
        self, identity: Identity, storage_id: str, body: AccessorCreate
    ) -> AccessorCreated:
        doc = await self._owned.ready(identity, storage_id, kind="object")
        if body.expires_at is not None:
            lifetime = body.expires_at - now()
            if not MIN_ACCESSOR_LIFETIME <= lifetime <= MAX_ACCESSOR_LIFETIME:
                raise ValidationFailed("expiresAt must be between 15 minutes and a year ahead")
        accessor, secret = await self.issue(
            doc, body.mode, expires_at=body.expires_at, name=body.name, instance_id=None,
            created_by=identity.subject,
        )  # fmt: skip
        return AccessorCreated(
            **accessor_view(accessor).model_dump(),
            secret_access_key=secret,
            endpoint=self._backend.public_endpoint,
            region=self._backend.region,
            bucket=doc["bucket"],
        )

    async def issue(
        self,
        storage: StorageDoc,
        mode: AccessMode,
        *,
        expires_at: datetime | None,
        name: str | None,
        instance_id: str | None,
        created_by: str,
    ) -> tuple[AccessorDoc, str]:
        key, secret = access_key(), secrets.token_urlsafe(30)
        accessor: AccessorDoc = {
            "_id": key,
            "tenant_id": storage["tenant_id"],
            "storage_id": storage["storage_id"],
            "name": name,
            "mode": mode,
            "expires_at": expires_at,
            "instance_id": instance_id,
            "created_by": created_by,
            "created_at": now(),
        }
        # Recorded first: whatever the backend did, the record lets a delete revoke it.
        await self._accessors.insert(accessor)
        try:
            await self._backend.create_credential(
                access_key=key, secret_key=secret, bucket=storage["bucket"], mode=mode,
                expires_at=expires_at,
                description=f"gpucloud {storage['tenant_id']}/{storage['storage_id']}",
            )  # fmt: skip
        except BaseException:
            await self._accessors.remove(key)
            raise
        return accessor, secret

    async def list(self, identity: Identity, storage_id: str) -> list[Accessor]:
        doc = await self._owned.get(identity, storage_id)
        found = await self._accessors.of_storage(doc["tenant_id"], storage_id)
        return [accessor_view(accessor) for accessor in found]

    async def delete(self, identity: Identity, storage_id: str, accessor_id: str) -> None:
        doc = await self._owned.get(identity, storage_id)
        accessor = await self._accessors.get(accessor_id)
        if (
            accessor is None
            or accessor["tenant_id"] != doc["tenant_id"]
            or accessor["storage_id"] != storage_id
        ):
            raise NotFound(f"accessor {accessor_id!r} not found")
        if accessor.get("instance_id"):
            raise Conflict(
                f"accessor {accessor_id!r} belongs to instance {accessor['instance_id']!r}; "
                "it is revoked when the instance stops"
            )
        await self.revoke(accessor_id)

    async def revoke(self, accessor_id: str) -> None:
        await self._backend.revoke_credential(accessor_id)
        await self._accessors.remove(accessor_id)

    async def revoke_all(
        self, tenant_id: str, storage_id: str, *, instance_id: str | None = None
    ) -> None:
        """Every accessor of the storage, or only the ones of `instance_id` when given."""
        for accessor in await self._accessors.of_storage(tenant_id, storage_id):
            if instance_id is None or accessor.get("instance_id") == instance_id:
                await self.revoke(accessor["_id"])
