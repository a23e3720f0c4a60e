"""Signals between the API's side and the controller: wake-ups for the controller
after a recorded request, and news of recorded transitions for waiting readers."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import NamedTuple

from .documents import InstanceDoc
from .store import RequestStore

#: The controller's work items: an instance key (`<tenant>/<instance>`), a job
#: (`job:<tenant>/<job>`), an inference service (`service:<tenant>/<service>`), a
#: tenant's namespace, or the stock pool.
STOCKS = "stocks"
TENANT_PREFIX = "tenant:"
JOB_PREFIX = "job:"
SERVICE_PREFIX = "service:"


def tenant_item(tenant_id: str) -> str:
    return f"{TENANT_PREFIX}{tenant_id}"


def job_item(key: str) -> str:
    return f"{JOB_PREFIX}{key}"


def service_item(key: str) -> str:
    return f"{SERVICE_PREFIX}{key}"


class ControllerWakeups:
    def __init__(
        self,
        requests: RequestStore,
        wake_local: Callable[[str], bool],
        wake_new_local: Callable[[InstanceDoc], bool],
    ) -> None:
        self._requests = requests
        self._wake_local = wake_local
        self._wake_new_local = wake_new_local

    async def wake(self, item: str) -> None:
        """At once when this replica leads, through the store for the leader otherwise.
        A leader that dies before it acted leaves the item to its successor's first
        resync, which queues every instance not yet settled."""
        if not self._wake_local(item):
            await self._requests.wake(item)

    async def wake_new(self, doc: InstanceDoc) -> None:
        """`wake` for an instance just inserted: a leading replica's controller takes
        the document as inserted, so its first reconcile reads nothing."""
        if not self._wake_new_local(doc):
            await self._requests.wake(doc["_id"])


class Recorded(NamedTuple):
    """An instance as a transition left it, and whether a stop was being carried out."""

    doc: InstanceDoc
    stop_requested: bool


class InstanceChanges:
    """Readers waiting for an instance's next transition, handed the recorded document
    as the controller records it, so the answer needs no read of its own. Only this
    replica's controller tells, so a reader served by another replica looks at the
    store again every so often instead."""

    def __init__(self) -> None:
        self._news: dict[str, asyncio.Future[Recorded]] = {}

    def listen(self, key: str) -> asyncio.Future[Recorded]:
        """Take this before reading the instance, so no transition falls in between."""
        news = self._news.get(key)
        if news is None or news.done():
            news = self._news[key] = asyncio.get_running_loop().create_future()
        return news

    def notify(self, doc: InstanceDoc, *, stop_requested: bool) -> None:
        news = self._news.pop(doc["_id"], None)
        if news is not None and not news.done():
            news.set_result(Recorded(doc, stop_requested))

    async def wait(
        self, key: str, news: asyncio.Future[Recorded], timeout_s: float
    ) -> Recorded | None:
        """The transition recorded next, or None after `timeout_s` (look again)."""
        try:
            # Shielded: readers of the same instance share the future.
            return await asyncio.wait_for(asyncio.shield(news), timeout_s)
        except TimeoutError:
            if self._news.get(key) is news:
                del self._news[key]  # others sharing it fall back to looking again
            return None
