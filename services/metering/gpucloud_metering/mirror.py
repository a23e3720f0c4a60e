"""An in-memory mirror of an insert-only fact collection, kept current by minute.

Reports, budgets and invoices read every fact of a tenant (or of all tenants) to
price it exactly. FerretDB hands only equality filters to PostgreSQL, so each
such read was a scan of the whole collection: 26 s for 172,000 transitions, on
every report and every budget pass. Facts are never updated or deleted, so a
replica reads them all once and then, before each read, only the minutes
recorded since: an equality query per minute on `recorded_minute`.

Each refresh reads the last OVERLAP_MINUTES again, so a fact stamped by another
replica whose clock is behind, or whose insert was slow to land, is still found.
A fact the minutes cannot find (a clock further behind; a replica of an older
version, which stamps no minute) is found by `reread`, a whole read the service
runs in the background every REREAD_S: it only adds, since facts never go, and
readers keep being served meanwhile. (A count would not do: FerretDB counts by
decoding every document, a scan as long as the read.)
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Generic, TypeVar

from gpucloud_libs.clock import now
from gpucloud_libs.mongo import Collection

#: Minutes before the last refresh read again: a bound on clock skew between
#: replicas plus insert latency.
OVERLAP_MINUTES = 10
#: Past this many minutes since the last refresh, one full read is cheaper.
FULL_READ_AFTER_MINUTES = 24 * 60
#: Minutes read at once.
PARALLEL_MINUTES = 16
#: How often the whole collection is read again in the background (`reread`).
REREAD_S = 1800.0

FactT = TypeVar("FactT", bound=Mapping[str, Any])

log = logging.getLogger(__name__)


def recorded_minute(recorded: datetime) -> int:
    """The minute a fact was recorded in, since the epoch: the key a mirror refreshes by."""
    return int(recorded.timestamp()) // 60


class FactMirror(Generic[FactT]):
    def __init__(self, collection: Collection[FactT]) -> None:
        self._collection = collection
        self._by_tenant: dict[str, dict[str, FactT]] = defaultdict(dict)
        #: The minute the last refresh began in; None before the first (whole) read.
        self._read_from: int | None = None
        self._lock = asyncio.Lock()

    async def of(self, tenant_id: str | None) -> list[FactT]:
        """Every fact of a tenant, or of all tenants: current as of this call."""
        await self._refresh()
        if tenant_id is not None:
            return list(self._by_tenant.get(tenant_id, {}).values())
        return [doc for docs in self._by_tenant.values() for doc in docs.values()]

    async def reread(self) -> int:
        """Read the whole collection again, adding what the minutes missed; how many
        facts that was. Readers are served from memory meanwhile."""
        if self._read_from is None:
            return 0  # not read yet: the first reader reads it whole
        docs = await self._collection.find({}).to_list()
        async with self._lock:
            added = self._keep(docs)
        if added:
            log.warning(
                "facts the minutes did not find, added by the whole read",
                extra={"collection": self._collection.name, "added": added},
            )
        return added

    async def _refresh(self) -> None:
        async with self._lock:
            minute = recorded_minute(now())
            if self._read_from is None or minute - self._read_from > FULL_READ_AFTER_MINUTES:
                self._keep(await self._collection.find({}).to_list())
            else:
                await self._read_minutes(self._read_from - OVERLAP_MINUTES, minute)
            self._read_from = minute

    async def _read_minutes(self, first: int, last: int) -> None:
        minutes = list(range(first, last + 1))
        for at in range(0, len(minutes), PARALLEL_MINUTES):
            for found in await asyncio.gather(
                *(self._collection.find({"recorded_minute": m}).to_list()
                  for m in minutes[at : at + PARALLEL_MINUTES])
            ):  # fmt: skip
                self._keep(found)

    def _keep(self, docs: list[FactT]) -> int:
        """Add `docs` (a fact read twice is kept once); how many were new."""
        added = 0
        for doc in docs:
            tenant = self._by_tenant[doc["tenant_id"]]
            added += doc["_id"] not in tenant
            tenant[doc["_id"]] = doc
        return added
