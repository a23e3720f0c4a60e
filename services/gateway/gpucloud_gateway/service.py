"""Gateway domain logic: API-key authentication and the bootstrap platform admin."""

from __future__ import annotations

import hashlib

from gpucloud_libs.errors import Unauthenticated

from .schemas import Principal
from .store import ApiKeyStore

BOOTSTRAP_KEY_ID = "bootstrap-platform-admin"


def hash_secret(secret: str) -> str:
    """API keys are 256-bit random strings, so a fast hash is safe to store and look up."""
    return hashlib.sha256(secret.encode()).hexdigest()


async def install_bootstrap_admin(store: ApiKeyStore, secret: str) -> None:
    await store.upsert_bootstrap(BOOTSTRAP_KEY_ID, hash_secret(secret))


async def authenticate(store: ApiKeyStore, presented: str | None) -> Principal:
    if not presented:
        raise Unauthenticated("send an API key as `Authorization: Bearer <key>`")
    record = await store.find_active_by_hash(hash_secret(presented))
    if record is None:
        raise Unauthenticated("the API key is unknown or revoked")
    # .get: FerretDB drops null fields written through $setOnInsert, so an absent
    # tenant_id and a null one both mean "no tenant" (a platform admin).
    return Principal(
        key_id=record["key_id"], role=record["role"], tenant_id=record.get("tenant_id")
    )
