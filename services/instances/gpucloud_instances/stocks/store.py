"""The stock operations (targets) and units."""

from __future__ import annotations

from datetime import datetime

from pymongo.errors import DuplicateKeyError

from gpucloud_libs.clock import now
from gpucloud_libs.mongo import Collection, Database, Document, typed

from ..store import STOCK_OPERATIONS, STOCKS
from .documents import StockUnitDoc


class StockStore:
    """Warm pools: operations (inserted by the API, keyed by operationID) add up to a
    target per spec; one document per placeholder pod, written by the controller only."""

    def __init__(self, db: Database) -> None:
        self._operations = db[STOCK_OPERATIONS]
        self._stocks: Collection[StockUnitDoc] = typed(db, STOCKS, StockUnitDoc)

    async def record_operation(
        self, spec_name: str, delta: int, operation_id: str, images: list[str] | None = None
    ) -> bool:
        """False when this operationID was applied before (seed 004's idempotency key)."""
        operation: Document = {"_id": operation_id, "spec_name": spec_name, "delta": delta}
        if images is not None:
            operation["images"] = images
        try:
            await self._operations.insert_one({**operation, "at": now()})
        except DuplicateKeyError:
            return False
        return True

    async def targets(self) -> dict[str, int]:
        """Per spec: the operations' sum, never below zero."""
        totals: dict[str, int] = {}
        async for doc in self._operations.find({}, {"spec_name": 1, "delta": 1}):
            totals[doc["spec_name"]] = totals.get(doc["spec_name"], 0) + int(doc["delta"])
        return {spec: max(total, 0) for spec, total in totals.items()}

    async def images(self) -> dict[str, list[str]]:
        """Per spec: the images its placeholders pull, from the latest operation that
        named them."""
        latest: dict[str, tuple[datetime, list[str]]] = {}
        async for doc in self._operations.find({}, {"spec_name": 1, "images": 1, "at": 1}):
            if "images" not in doc:
                continue
            spec = doc["spec_name"]
            if spec not in latest or latest[spec][0] <= doc["at"]:
                latest[spec] = (doc["at"], list(doc["images"]))
        return {spec: images for spec, (_, images) in latest.items()}

    async def units(self, spec_name: str | None = None) -> list[StockUnitDoc]:
        query = {} if spec_name is None else {"spec_name": spec_name}
        return [doc async for doc in self._stocks.find(query)]

    async def add_unit(self, name: str, spec_name: str) -> StockUnitDoc:
        """Record a unit being placed; returns it as recorded."""
        unit: StockUnitDoc = {
            "_id": name,
            "spec_name": spec_name,
            "state": "placing",
            "node": None,
            "zone": None,
            "created_at": now(),
        }
        await self._stocks.insert_one(unit)
        return unit

    async def mark_available(self, name: str, node: str, zone: str | None) -> None:
        await self._stocks.update_one(
            {"_id": name}, {"$set": {"state": "available", "node": node, "zone": zone}}
        )

    async def remove_unit(self, name: str) -> None:
        await self._stocks.delete_one({"_id": name})
