"""An in-memory mirror of an insert-only fact collection, kept current by minute.

Reports, budgets and invoices read every fact of a tenant (or of all tenants) to
price it exactly. FerretDB hands only equality filters to PostgreSQL, so each
such read was a scan of the whole collection: 26 s for 172,000 transitions, on
every report and every budget pass. Facts are never updated or deleted, so a
replica reads them all once and then, before each read, only the minutes
recorded since: an equality query per minute on `recorded_minute`.

Each refresh reads the last minutes again (OVERLAP_MINUTES), so a fact stamped by
another replica whose clock is a little behind, or whose insert was slow to land,
is still found. A fact the minutes cannot find (a clock further behind; a replica
of an older version, which stamps no minute) is caught by the collection's count:
at most every COUNT_CHECK_S, a mirror holding fewer facts than the collection
held before the refresh began reads it whole again.
"""

from __future__ import annotations

import asyncio
import logging
import time
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
#: Minutes read at once.
PARALLEL_MINUTES = 16
#: How often the collection's count is compared with the mirror's.
COUNT_CHECK_S = 60.0

FactT = TypeVar("FactT", bound=Mapping[str, Any])

log = logging.getLogger(__name__)


def recorded_minute(recorded: datetime) -> int:
    """The minute a fact was recorded in, since the epoch: the key a mirror refreshes by."""
    return int(recorded.timestamp()) // 60


class FactMirror(Generic[FactT]):
    def __init__(self, collection: Collection[FactT]) -> None:
        self._collection = collection
        self._by_tenant: dict[str, dict[str, FactT]] = defaultdict(dict)
        self._size = 0
        #: The minute the last refresh began in; None before the first (full) read.
        self._read_from: int | None = None
        self._counted_at = 0.0
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
            counted = await self._count_due()
            if self._read_from is None or minute - self._read_from > FULL_READ_AFTER_MINUTES:
                await self._read_whole()
            else:
                await self._read_minutes(self._read_from - OVERLAP_MINUTES, minute)
                if counted is not None and self._size < counted:
                    log.warning(
                        "facts the minutes did not find: reading the collection again",
                        extra={"collection": self._collection.name, "mirrored": self._size,
                               "stored": counted},
                    )  # fmt: skip
                    await self._read_whole()
            self._read_from = minute

    async def _count_due(self) -> int | None:
        """The collection's size now, when a check is due (every COUNT_CHECK_S)."""
        if time.monotonic() - self._counted_at < COUNT_CHECK_S:
            return None
        self._counted_at = time.monotonic()
        return await self._collection.estimated_document_count()

    async def _read_whole(self) -> None:
        self._by_tenant = defaultdict(dict)
        self._size = 0
        self._keep(await self._collection.find({}).to_list())

    async def _read_minutes(self, first: int, last: int) -> None:
        minutes = list(range(first, last + 1))
        for at in range(0, len(minutes), PARALLEL_MINUTES):
            for found in await asyncio.gather(
                *(self._collection.find({"recorded_minute": m}).to_list()
                  for m in minutes[at : at + PARALLEL_MINUTES])
            ):  # fmt: skip
                self._keep(found)

    def _keep(self, docs: list[FactT]) -> None:
        for doc in docs:
            tenant = self._by_tenant[doc["tenant_id"]]
            if doc["_id"] not in tenant:
                self._size += 1
            tenant[doc["_id"]] = doc
