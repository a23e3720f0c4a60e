"""The leader's memory of live instances: no read of the store for a reconcile the pod watch woke."""

from __future__ import annotations

import asyncio

from gpucloud_libs.mongo import Document

from ..documents import InstanceDoc
from ..lifecycle import LIVE, State
from ..store import RequestStore
from .store import InstanceStore


class KnownInstances:
    """The leader's last word on each live instance: its document as the controller
    last read or wrote it, and the stop request recorded then.

    The controller is an instance's only writer after the API inserts it, and every
    change from outside (the insert, a stop or delete request, another replica's
    wake-up, a resync) forgets the instance before it wakes the controller. So a
    reconcile woken by the pod watch, most of a start's, needs no read of the store.
    """

    def __init__(self, instances: InstanceStore, requests: RequestStore) -> None:
        self._instances = instances
        self._requests = requests
        self._known: dict[str, tuple[InstanceDoc, Document | None]] = {}
        self._reading: set[str] = set()
        self._forgotten_while_reading: set[str] = set()

    async def read(self, key: str) -> tuple[InstanceDoc | None, Document | None]:
        known = self._known.get(key)
        if known is not None:
            return known
        self._reading.add(key)
        try:
            doc, stop_request = await asyncio.gather(
                self._instances.get(key), self._requests.stop_request(key)
            )
        finally:
            self._reading.discard(key)
            # Told of an outside change while reading: the next reconcile reads again.
            told = key in self._forgotten_while_reading
            self._forgotten_while_reading.discard(key)
        if not told and doc is not None and doc.get("admitted"):
            self.remember(doc, stop_request)
        return doc, stop_request

    def remember(self, doc: InstanceDoc, stop_request: Document | None) -> None:
        if State(doc["state"]) in LIVE:
            self._known[doc["_id"]] = (doc, stop_request)
        else:
            self._known.pop(doc["_id"], None)  # settled: rarely reconciled again

    def wrote(self, doc: InstanceDoc) -> None:
        """The controller wrote `doc`: keep it, unless the instance was forgotten since."""
        known = self._known.get(doc["_id"])
        if known is not None:
            self.remember(doc, known[1])

    def forget(self, key: str) -> None:
        self._known.pop(key, None)
        if key in self._reading:
            self._forgotten_while_reading.add(key)

    def forget_all(self) -> None:
        """Leadership ended: the next leader's word is the store's."""
        self._known.clear()
        self._forgotten_while_reading.update(self._reading)
