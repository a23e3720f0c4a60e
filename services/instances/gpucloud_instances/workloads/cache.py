"""The instances service's one copy in memory of its instance documents, written through
by the store: `InstanceStore` hands it every write it made, as the store took it.

Three readers share the copy, each trusting it as far as it may:
- The leader's controller (`controller_view`, `controller_read`) is an instance's only
  writer after admission, and every change from outside (another replica's insert or
  request, a resync that found a pod drifted) is told here (`forget`) before the
  controller wakes. So a reconcile woken by the pod watch, most of a start's, reads
  nothing. With several replicas only what the leader read or was handed is held, and
  settled instances are let go.
- Where one replica runs (`complete`), this process writes every instance: once filled
  from the store, pages and the API's reads of one instance come from here (on
  FerretDB a page costs the decoding of every document of the tenant, decision 86).
  Deleted instances are not held: a page of them comes from the store.
- Readers waiting for an instance's next write (`listen`, `wait`) are handed the
  document as written, and observers (the admission queue's waiting room) see it too.

A write that failed may have landed all the same: its instance is read again before
it is served. Callers read the documents handed out and never change them (a changed
document is a new dict, as everywhere in the service).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import NamedTuple

from gpucloud_libs.mongo import Document

from ..documents import InstanceDoc, workload_project
from ..lifecycle import LIVE, State

log = logging.getLogger(__name__)


class Recorded(NamedTuple):
    """An instance as a write left it, and whether a stop was then being carried out
    (None: the cache does not know; read the request)."""

    doc: InstanceDoc
    stop_requested: bool | None


#: Told of each instance written (the document) or gone (its key, with None).
Observer = Callable[[str, InstanceDoc | None], None]


class WorkloadCache:
    def __init__(self, *, complete: bool) -> None:
        #: This process writes every instance (one replica): once `ready`, it holds
        #: every instance not deleted.
        self.complete = complete
        self.ready = False
        self._docs: dict[str, InstanceDoc] = {}
        self._keys: dict[str, list[str]] = {}  # tenant -> its keys held, in `_id` order
        #: The live stop request the controller last read, by instance (None: none).
        self._stops: dict[str, Document | None] = {}
        self._unsure: set[str] = set()  # read again before it is served
        self._reading: dict[str, int] = {}  # keys being read, and by how many
        self._told_while_reading: set[str] = set()
        self._filling = False
        self._touched: set[str] = set()  # written while the fill ran
        self._news: dict[str, asyncio.Future[Recorded]] = {}
        self._observers: list[Observer] = []

    # --- what the store tells -------------------------------------------------------

    def written(self, doc: InstanceDoc) -> None:
        """The store took this document as it now is (a whole one)."""
        key = doc["_id"]
        self._changed(key)
        self._unsure.discard(key)
        if self.complete or key in self._docs:
            self._put_if_held(doc)
        if State(doc["state"]) not in LIVE:
            self._stops.pop(key, None)  # settled: rarely reconciled again, then read afresh
        self._tell(doc)

    def merge(self, key: str, fields: Document) -> None:
        """The store set these fields of the instance."""
        held = self._docs.get(key)
        if held is not None:
            self.written({**held, **fields})  # type: ignore[typeddict-item]
        elif self._filling:
            self.forget(key)  # the fill may have read it before or after
        else:
            self._changed(key)

    def removed(self, key: str) -> None:
        self._changed(key)
        self._drop(key)
        for observe in self._observers:
            observe(key, None)

    def forget(self, key: str) -> None:
        """The instance may have changed where this process cannot see how: a write
        that failed, a request recorded, another replica's write. It is read again
        before it is served, and the controller reads its stop request again."""
        self._changed(key)
        self._stops.pop(key, None)
        if self.complete:
            self._unsure.add(key)
        else:
            self._drop(key)

    def forget_all(self) -> None:
        """Leadership changed hands: the controller's next word is the store's."""
        self._stops.clear()
        self._told_while_reading.update(self._reading)
        if not self.complete:
            for key in list(self._docs):
                self._drop(key)

    def observe(self, observer: Observer) -> None:
        self._observers.append(observer)

    # --- the controller's reads ------------------------------------------------------

    def controller_view(self, key: str) -> tuple[InstanceDoc, Document | None] | None:
        """The instance and its stop request as the controller may trust them, or None
        (read them, through `reading`)."""
        if key in self._unsure or key not in self._stops:
            return None
        doc = self._docs.get(key)
        return None if doc is None else (doc, self._stops[key])

    @contextlib.contextmanager
    def reading(self, key: str) -> Iterator[Callable[[InstanceDoc | None, Document | None], None]]:
        """Around the controller's read of an instance and its stop request: hands a
        function that keeps what was read, unless a change was told meanwhile (the
        next reconcile reads again)."""
        self._reading[key] = self._reading.get(key, 0) + 1

        def keep(doc: InstanceDoc | None, stop_request: Document | None) -> None:
            if key in self._told_while_reading:
                return
            self._unsure.discard(key)
            if doc is None:
                self._drop(key)
            elif self.complete or doc.get("admitted"):
                self._put_if_held(doc)
                if doc.get("admitted") and key in self._docs and State(doc["state"]) in LIVE:
                    self._stops[key] = stop_request  # settled ones are read afresh
            for observe in self._observers:
                observe(key, doc)

        try:
            yield keep
        finally:
            self._reading[key] -= 1
            if not self._reading[key]:
                del self._reading[key]
                self._told_while_reading.discard(key)

    def handed(self, doc: InstanceDoc) -> None:
        """The API inserted `doc` and hands it to this replica's controller: it has no
        stop request yet."""
        self._put_if_held(doc)
        if doc["_id"] in self._docs:
            self._stops[doc["_id"]] = None

    # --- the API's reads -------------------------------------------------------------

    async def fill(self, every_instance: Callable[[], Awaitable[Iterable[InstanceDoc]]]) -> None:
        """Hold every instance not deleted (complete only), read once at start; a write
        made during the fill wins over what the fill read."""
        self._filling = True
        try:
            docs = await every_instance()
        finally:
            self._filling = False
        for doc in docs:
            if doc["_id"] not in self._touched and doc["_id"] not in self._docs:
                self._put(doc)
        self._touched.clear()
        self.ready = True
        log.info("instances served from memory", extra={"instances": len(self._docs)})

    def serves(self, states: list[str] | None = None) -> bool:
        """Whether pages with these states (and reads of one instance) come from here."""
        return self.ready and State.DELETED.value not in (states or ())

    def take_unsure(self) -> list[str]:
        keys, self._unsure = list(self._unsure), set()
        return keys

    def refreshed(self, key: str, doc: InstanceDoc | None) -> None:
        """What the store holds for an instance left unsure."""
        if doc is None:
            self._drop(key)
        else:
            self._put_if_held(doc)

    def get(self, key: str) -> InstanceDoc | None:
        return self._docs.get(key)

    def page(
        self,
        tenant_id: str,
        *,
        states: list[str] | None,
        spec_name: str | None,
        after: str | None,
        limit: int,
        projects: tuple[str, ...] | None = None,
    ) -> list[InstanceDoc]:
        """The store's page (`InstanceStore.page`, one tenant), from memory; as there,
        without the events still to publish."""
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
            if projects is not None and workload_project(doc) not in projects:
                continue
            page.append(_without_outbox(doc))
            if len(page) == limit:
                break
        return page

    def tenants(self) -> list[str]:
        """The tenants holding any instance not deleted."""
        return list(self._keys)

    # --- waiting for the next write --------------------------------------------------

    def listen(self, key: str) -> asyncio.Future[Recorded]:
        """Take this before reading the instance, so no write falls in between."""
        news = self._news.get(key)
        if news is None or news.done():
            news = self._news[key] = asyncio.get_running_loop().create_future()
        return news

    async def wait(
        self, key: str, news: asyncio.Future[Recorded], timeout_s: float
    ) -> Recorded | None:
        """The instance as written next, or None after `timeout_s` (look again: another
        replica's writes are not told here)."""
        try:
            # Shielded: readers of the same instance share the future.
            return await asyncio.wait_for(asyncio.shield(news), timeout_s)
        except TimeoutError:
            if self._news.get(key) is news:
                del self._news[key]  # others sharing it fall back to looking again
            return None

    # --- inside ----------------------------------------------------------------------

    def _put_if_held(self, doc: InstanceDoc) -> None:
        """Hold `doc`: every instance not deleted where this process writes them all,
        elsewhere only the controller's live ones."""
        state = State(doc["state"])
        if state != State.DELETED and (self.complete or state in LIVE):
            self._put(doc)
        else:
            self._drop(doc["_id"])

    def _changed(self, key: str) -> None:
        if key in self._reading:
            self._told_while_reading.add(key)
        if self._filling:
            self._touched.add(key)

    def _tell(self, doc: InstanceDoc) -> None:
        key = doc["_id"]
        news = self._news.pop(key, None)
        if news is not None and not news.done():
            stop = self._stops.get(key, ...)
            news.set_result(Recorded(doc, None if stop is ... else stop is not None))
        for observe in self._observers:
            observe(key, doc)

    def _put(self, doc: InstanceDoc) -> None:
        key = doc["_id"]
        if key not in self._docs:
            bisect.insort(self._keys.setdefault(doc["tenant_id"], []), key)
        self._docs[key] = doc

    def _drop(self, key: str) -> None:
        self._stops.pop(key, None)
        doc = self._docs.pop(key, None)
        if doc is None:
            return
        keys = self._keys[doc["tenant_id"]]
        del keys[bisect.bisect_left(keys, key)]
        if not keys:
            del self._keys[doc["tenant_id"]]


def _without_outbox(doc: InstanceDoc) -> InstanceDoc:
    if "outbox" not in doc:
        return doc
    return {k: v for k, v in doc.items() if k != "outbox"}  # type: ignore[return-value]
