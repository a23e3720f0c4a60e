"""The stock operations (targets) and units."""

from __future__ import annotations

from datetime import datetime

from pymongo.errors import DuplicateKeyError

from gpucloud_libs.clock import now
from gpucloud_libs.mongo import Collection, Database, Document, typed

from ..store import STOCK_OPERATIONS, STOCKS
from .documents import StockUnitDoc

#: A stock: the cluster its units are kept in, and their spec.
StockKey = tuple[str, str]


class StockStore:
    """Warm pools: operations (inserted by the API, keyed by operationID) add up to a
    target per cluster and spec; one document per placeholder pod, written by the
    controller only. Operations and units recorded before clusters were (no `cluster`)
    are the home cluster's."""

    def __init__(self, db: Database, *, home: str) -> None:
        self._operations = db[STOCK_OPERATIONS]
        self._stocks: Collection[StockUnitDoc] = typed(db, STOCKS, StockUnitDoc)
        self._home = home

    async def record_operation(
        self, key: StockKey, delta: int, operation_id: str, images: list[str] | None = None
    ) -> bool:
        """False when this operationID was applied before (seed 004's idempotency key)."""
        cluster, spec_name = key
        operation: Document = {
            "_id": operation_id, "cluster": cluster, "spec_name": spec_name, "delta": delta,
        }  # fmt: skip
        if images is not None:
            operation["images"] = images
        try:
            await self._operations.insert_one({**operation, "at": now()})
        except DuplicateKeyError:
            return False
        return True

    async def targets(self) -> dict[StockKey, int]:
        """Per cluster and spec: the operations' sum, never below zero."""
        totals: dict[StockKey, int] = {}
        async for doc in self._operations.find({}, {"cluster": 1, "spec_name": 1, "delta": 1}):
            key = self._key(doc)
            totals[key] = totals.get(key, 0) + int(doc["delta"])
        return {key: max(total, 0) for key, total in totals.items()}

    async def images(self) -> dict[StockKey, list[str]]:
        """Per cluster and spec: the images its placeholders pull, from the latest
        operation that named them."""
        latest: dict[StockKey, tuple[datetime, list[str]]] = {}
        fields = {"cluster": 1, "spec_name": 1, "images": 1, "at": 1}
        async for doc in self._operations.find({}, fields):
            if "images" not in doc:
                continue
            key = self._key(doc)
            if key not in latest or latest[key][0] <= doc["at"]:
                latest[key] = (doc["at"], list(doc["images"]))
        return {key: images for key, (_, images) in latest.items()}

    async def units(self, cluster: str | None = None) -> list[StockUnitDoc]:
        """Every unit, or one cluster's, each with its cluster."""
        units = []
        async for doc in self._stocks.find({}):
            doc["cluster"] = doc.get("cluster") or self._home
            if cluster is None or doc["cluster"] == cluster:
                units.append(doc)
        return units

    def _key(self, doc: Document) -> StockKey:
        return doc.get("cluster") or self._home, doc["spec_name"]

    async def add_unit(self, name: str, key: StockKey) -> StockUnitDoc:
        """Record a unit being placed; returns it as recorded."""
        cluster, spec_name = key
        unit: StockUnitDoc = {
            "_id": name,
            "cluster": cluster,
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
