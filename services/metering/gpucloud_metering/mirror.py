"""An in-memory mirror of an insert-only fact collection, kept current by minute.

Reports, budgets and invoices read every fact of a tenant (or of all tenants) to
price it exactly. FerretDB hands only equality filters to PostgreSQL, so each
such read was a scan of the whole collection: 26 s for 172,000 transitions, on
every report and every budget pass. Facts are never updated or deleted, so a
replica reads them all once and then, before each read, only the minutes
recorded since: an equality query per minute on `recorded_minute`.

Each refresh reads the last minutes again (OVERLAP_MINUTES), so a fact stamped by
another replica whose clock is behind ours, or whose insert was slow to land,
is still found. A document is kept by `_id`, so reading one twice is harmless.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Generic, TypeVar

from gpucloud_libs.clock import now
from gpucloud_libs.mongo import Collection

#: Minutes before the last refresh read again: a bound on clock skew between
#: replicas plus insert latency.
OVERLAP_MINUTES = 2
#: Past this many minutes since the last refresh, one full read is cheaper.
FULL_READ_AFTER_MINUTES = 24 * 60

FactT = TypeVar("FactT", bound=Mapping[str, Any])


def recorded_minute(recorded: datetime) -> int:
    """The minute a fact was recorded in, since the epoch: the key a mirror refreshes by."""
    return int(recorded.timestamp()) // 60


class FactMirror(Generic[FactT]):
    def __init__(self, collection: Collection[FactT]) -> None:
        self._collection = collection
        self._by_tenant: dict[str, dict[str, FactT]] = defaultdict(dict)
        #: The minute the last refresh began in; None before the first (full) read.
        self._read_from: int | None = None
        self._lock = asyncio.Lock()

    async def of(self, tenant_id: str | None) -> list[FactT]:
        """Every fact of a tenant, or of all tenants: current as of this call."""
        await self._refresh()
        if tenant_id is not None:
            return list(self._by_tenant.get(tenant_id, {}).values())
        return [doc for docs in self._by_tenant.values() for doc in docs.values()]

    async def _refresh(self) -> None:
        async with self._lock:
            minute = recorded_minute(now())
            if self._read_from is None or minute - self._read_from > FULL_READ_AFTER_MINUTES:
                self._keep(await self._collection.find({}).to_list())
            else:
                first = self._read_from - OVERLAP_MINUTES
                for found in await asyncio.gather(
                    *(self._collection.find({"recorded_minute": m}).to_list()
                      for m in range(first, minute + 1))
                ):  # fmt: skip
                    self._keep(found)
            self._read_from = minute

    def _keep(self, docs: list[FactT]) -> None:
        for doc in docs:
            self._by_tenant[doc["tenant_id"]][doc["_id"]] = doc
