"""Signals between the API's side and the controller: wake-ups for the controller
after a recorded request, and news of recorded transitions for waiting readers."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

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
        reserve_stock: Callable[[str, str, list[str]], None],
    ) -> None:
        self._requests = requests
        self._wake_local = wake_local
        self.reserve_stock = reserve_stock

    async def wake(self, item: str) -> None:
        """At once when this replica leads, through the store for the leader otherwise.
        A leader that dies before it acted leaves the item to its successor's first
        resync, which queues every instance not yet settled."""
        if not self._wake_local(item):
            await self._requests.wake(item)


class InstanceChanges:
    """Readers waiting for an instance's next transition, woken as the controller
    records it. Only this replica's controller notifies, so a reader served by
    another replica looks at the store again every so often instead."""

    def __init__(self) -> None:
        self._events: dict[str, asyncio.Event] = {}

    def listen(self, key: str) -> asyncio.Event:
        """Take this before reading the instance, so no transition falls in between."""
        return self._events.setdefault(key, asyncio.Event())

    def notify(self, key: str) -> None:
        event = self._events.pop(key, None)
        if event is not None:
            event.set()

    async def wait(self, key: str, event: asyncio.Event, timeout_s: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout_s)
        if not event.is_set() and self._events.get(key) is event:
            del self._events[key]  # others sharing it fall back to looking again
