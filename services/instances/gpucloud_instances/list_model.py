"""Instance lists served from memory: a copy of every instance document that is
not deleted, kept by the writes this process makes.

On FerretDB a list costs the decoding of every document of the tenant, about a
millisecond each on a loaded machine, whatever the page size (docs/decisions.md,
86). The instances service writes every instance document itself: the API
inserts it and the controller records everything after. So where one replica
runs, the copy is as fresh as the store: `InstanceStore` hands each write it
made to `written`, right after the store took it. A write that failed may have
landed all the same, so its instance is read again (by `_id`) before the next
page. Several replicas each write only part of it, so there the lists come from
the store (`lists_from_memory` off; the Helm chart turns it off with more than
one replica).

The copy is filled from the store once, at start; until then pages come from
the store. A write made during the fill wins over what the fill read. Pages and
`get` hand out the copy's own documents: callers read them and never change
them (a changed document is a new dict, as everywhere in the service).
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Awaitable, Callable, Iterable

from .documents import InstanceDoc
from .lifecycle import State

log = logging.getLogger(__name__)

#: Fields a page leaves out, as the store's own page does.
_LEFT_OUT = ("outbox",)


class InstanceListModel:
    def __init__(self) -> None:
        self._docs: dict[str, InstanceDoc] = {}
        self._keys: dict[str, list[str]] = {}  # tenant -> its keys, in `_id` order
        self._unsure: set[str] = set()  # a write failed: read again before serving
        self._filling = False
        self._touched: set[str] = set()  # written while the fill ran
        self.ready = False

    async def fill(self, every_instance: Callable[[], Awaitable[Iterable[InstanceDoc]]]) -> None:
        self._filling = True
        try:
            docs = await every_instance()
        finally:
            self._filling = False
        for doc in docs:
            if doc["_id"] not in self._touched:
                self._put(doc)
        self._touched.clear()
        self.ready = True
        log.info("instance lists served from memory", extra={"instances": len(self._docs)})

    def written(self, doc: InstanceDoc) -> None:
        """The store took this document as it now is (a whole one, or one merged with
        the fields set)."""
        if self._filling:
            self._touched.add(doc["_id"])
        self._unsure.discard(doc["_id"])
        self._put(doc)

    def merge(self, key: str, fields: dict[str, object]) -> None:
        """The store set these fields of the instance."""
        known = self._docs.get(key)
        if known is not None:
            self.written({**known, **fields})  # type: ignore[typeddict-item]
        elif self._filling:
            self.unsure(key)  # the fill may have read it before or after

    def removed(self, key: str) -> None:
        if self._filling:
            self._touched.add(key)
        self._drop(key)

    def unsure(self, key: str) -> None:
        """A write to the instance failed and may have landed."""
        self._unsure.add(key)
        if self._filling:
            self._touched.add(key)

    def take_unsure(self) -> list[str]:
        keys, self._unsure = list(self._unsure), set()
        return keys

    def refreshed(self, key: str, doc: InstanceDoc | None) -> None:
        """What the store holds for an instance a failed write left unsure."""
        if doc is None:
            self._drop(key)
        else:
            self._put(doc)

    def page(
        self,
        tenant_id: str,
        *,
        states: list[str] | None,
        spec_name: str | None,
        after: str | None,
        limit: int,
    ) -> list[InstanceDoc]:
        """The store's page (`InstanceStore.page`, one tenant), from memory. Deleted
        instances are not held: a page of them comes from the store."""
        keys = self._keys.get(tenant_id, [])
        start = bisect.bisect_right(keys, after) if after else 0
        wanted = set(states) if states else None
        page: list[InstanceDoc] = []
        for key in keys[start:]:
            doc = self._docs[key]
            if wanted is not None and doc["state"] not in wanted:
                continue
            if spec_name and doc["spec_name"] != spec_name:
                continue
            page.append(doc)
            if len(page) == limit:
                break
        return page

    def tenants(self) -> list[str]:
        """The tenants holding any instance not deleted."""
        return list(self._keys)

    def get(self, key: str) -> InstanceDoc | None:
        return self._docs.get(key)

    def _put(self, doc: InstanceDoc) -> None:
        if doc["state"] == State.DELETED.value:
            self._drop(doc["_id"])
            return
        key = doc["_id"]
        kept: InstanceDoc = {k: v for k, v in doc.items() if k not in _LEFT_OUT}  # type: ignore[assignment]
        if key not in self._docs:
            bisect.insort(self._keys.setdefault(doc["tenant_id"], []), key)
        self._docs[key] = kept

    def _drop(self, key: str) -> None:
        doc = self._docs.pop(key, None)
        if doc is None:
            return
        keys = self._keys[doc["tenant_id"]]
        del keys[bisect.bisect_left(keys, key)]
        if not keys:
            del self._keys[doc["tenant_id"]]
