"""How the API's side wakes the controller after recording a request."""

from __future__ import annotations

from collections.abc import Callable

from .store import RequestStore

#: The controller's work items: an instance key (`<tenant>/<instance>`), a tenant's
#: namespace, or the stock pool.
STOCKS = "stocks"
TENANT_PREFIX = "tenant:"


def tenant_item(tenant_id: str) -> str:
    return f"{TENANT_PREFIX}{tenant_id}"


class ControllerWakeups:
    def __init__(self, requests: RequestStore, wake_local: Callable[[str], bool]) -> None:
        self._requests = requests
        self._wake_local = wake_local

    async def wake(self, item: str) -> None:
        """At once when this replica leads, through the store for the leader otherwise.
        A leader that dies before it acted leaves the item to its successor's first
        resync, which queues every instance not yet settled."""
        if not self._wake_local(item):
            await self._requests.wake(item)
