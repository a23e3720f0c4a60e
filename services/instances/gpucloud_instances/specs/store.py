"""The specs' collection."""

from __future__ import annotations

from pymongo import ASCENDING
from pymongo.errors import DuplicateKeyError

from gpucloud_libs.mongo import Collection, Database, typed

from ..documents import (
    SpecDoc,
)
from ..store import SPECS


class SpecStore:
    def __init__(self, db: Database) -> None:
        self._specs: Collection[SpecDoc] = typed(db, SPECS, SpecDoc)

    async def insert(self, spec: SpecDoc) -> bool:
        try:
            await self._specs.insert_one(spec)
        except DuplicateKeyError:
            return False
        return True

    async def get(self, name: str) -> SpecDoc | None:
        return await self._specs.find_one({"_id": name})

    async def list(self) -> list[SpecDoc]:
        return [spec async for spec in self._specs.find({}).sort("_id", ASCENDING)]

    async def delete(self, name: str) -> bool:
        return (await self._specs.delete_one({"_id": name})).deleted_count == 1
