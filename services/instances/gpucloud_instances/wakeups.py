"""Wake-ups for the controller after a recorded request, and the work items they carry."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from .documents import InstanceDoc
from .store import RequestStore


class ItemKind(StrEnum):
    """What a controller work item is about, and so which reconciler takes it."""

    INSTANCE = "instance"
    JOB = "job"
    SERVICE = "service"
    TENANT = "tenant"  # a tenant's namespace
    STOCKS = "stocks"  # the stock pool, one item
    ADMISSION = "admission"  # the admission queue's pass, one item
    CLUSTERS = "clusters"  # a look at every cluster, one item


#: How each kind is written where an item is stored (a wake-up for the leader) or
#: logged: `job:<tenant>/<job>`; an instance by its key alone.
_PREFIXES = {ItemKind.JOB: "job:", ItemKind.SERVICE: "service:", ItemKind.TENANT: "tenant:"}
#: The kinds with one item each, written by their name.
_SINGLES = (ItemKind.STOCKS, ItemKind.ADMISSION, ItemKind.CLUSTERS)


@dataclass(frozen=True, slots=True)
class WorkItem:
    """One thing for the controller to reconcile: a kind and its key (an instance's,
    job's or service's `<tenant>/<id>`, a tenant's id; none for the single items)."""

    kind: ItemKind
    key: str = ""

    def __str__(self) -> str:
        if self.kind in _SINGLES:
            return self.kind.value
        return _PREFIXES.get(self.kind, "") + self.key

    @classmethod
    def parse(cls, text: str) -> WorkItem:
        """The item `str(item)` wrote."""
        for kind in _SINGLES:
            if text == kind.value:
                return cls(kind)
        for kind, prefix in _PREFIXES.items():
            if text.startswith(prefix):
                return cls(kind, text.removeprefix(prefix))
        return cls(ItemKind.INSTANCE, text)


STOCKS = WorkItem(ItemKind.STOCKS)
ADMISSION = WorkItem(ItemKind.ADMISSION)
CLUSTERS = WorkItem(ItemKind.CLUSTERS)


def instance_item(key: str) -> WorkItem:
    return WorkItem(ItemKind.INSTANCE, key)


def tenant_item(tenant_id: str) -> WorkItem:
    return WorkItem(ItemKind.TENANT, tenant_id)


def job_item(key: str) -> WorkItem:
    return WorkItem(ItemKind.JOB, key)


def service_item(key: str) -> WorkItem:
    return WorkItem(ItemKind.SERVICE, key)


class ControllerWakeups:
    def __init__(
        self,
        requests: RequestStore,
        wake_local: Callable[[WorkItem], bool],
        wake_new_local: Callable[[InstanceDoc], bool],
    ) -> None:
        self._requests = requests
        self._wake_local = wake_local
        self._wake_new_local = wake_new_local

    async def wake(self, item: WorkItem) -> None:
        """At once when this replica leads, through the store for the leader otherwise.
        A leader that dies before it acted leaves the item to its successor's first
        resync, which queues every instance not yet settled."""
        if not self._wake_local(item):
            await self._requests.wake(str(item))

    async def wake_new(self, doc: InstanceDoc) -> None:
        """`wake` for an instance just inserted: a leading replica's controller takes
        the document as inserted, so its first reconcile reads nothing."""
        if not self._wake_new_local(doc):
            await self._requests.wake(str(instance_item(doc["_id"])))
