"""All MongoDB access of the gateway."""

from __future__ import annotations

from datetime import UTC, datetime

from pymongo import ASCENDING, IndexModel

from gpucloud_libs.mongo import Database, Document, IndexPlan

API_KEYS = "api_keys"

INDEXES: IndexPlan = {
    API_KEYS: [
        IndexModel([("key_id", ASCENDING)], unique=True),
        IndexModel([("secret_hash", ASCENDING)], unique=True),
    ],
}


class ApiKeyStore:
    def __init__(self, db: Database) -> None:
        self._keys = db[API_KEYS]

    async def find_active_by_hash(self, secret_hash: str) -> Document | None:
        return await self._keys.find_one({"secret_hash": secret_hash, "revoked_at": None})

    async def upsert_bootstrap(self, key_id: str, secret_hash: str) -> None:
        """Install or rotate the bootstrap key, unless an operator revoked it."""
        await self._keys.update_one(
            {"key_id": key_id, "revoked_at": None},
            {
                "$set": {"secret_hash": secret_hash},
                "$setOnInsert": {
                    "role": "platform-admin",
                    "tenant_id": None,
                    "created_at": datetime.now(UTC),
                },
            },
            upsert=True,
        )
