"""A tenant's line in the admission queue, as the pass publishes it, and where one
queued job or instance stands in it.

The pass (queue/admissions.py) publishes each tenant's line when it changed
(QueueLineStore). A workload the line does not hold yet, one submitted since,
stands behind every queued workload of its priority or higher: that is where the
next pass puts it, since within a priority the oldest goes first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from itertools import accumulate

from ..documents import InstanceDoc, JobDoc
from ..job_lifecycle import JobState
from ..lifecycle import State
from ..schemas import QueuePosition
from ..wakeups import WorkItem
from .documents import QueueLineDoc
from .store import QueueLineStore

#: Until the admission queue's first pass over it, a workload waits for that pass.
NOT_PLACED_YET = "admission"


@dataclass(frozen=True)
class Line:
    """One tenant's queued workloads (their work items) in admission order."""

    items: list[str] = field(default_factory=list)
    gpus: list[int] = field(default_factory=list)
    priorities: list[int] = field(default_factory=list)

    @classmethod
    def of(cls, doc: QueueLineDoc | None) -> Line:
        return cls() if doc is None else cls(doc["items"], doc["gpus"], doc["priorities"])

    @cached_property
    def _index(self) -> dict[str, int]:
        return {item: index for index, item in enumerate(self.items)}

    @cached_property
    def _gpus_before(self) -> list[int]:
        return [0, *accumulate(self.gpus)]

    def position(self, item: str, priority: int, reason: str | None) -> QueuePosition:
        index = self._index.get(item)
        if index is None:
            return place_new(self.bands, priority, reason)
        return QueuePosition(
            position=index + 1,
            reason=reason or NOT_PLACED_YET,
            gpus_ahead=self._gpus_before[index],
        )

    @cached_property
    def bands(self) -> list[list[int]]:
        """The line summed by priority, highest first: [priority, workloads, GPUs]."""
        totals: dict[int, list[int]] = {}
        for priority, gpus in zip(self.priorities, self.gpus, strict=True):
            band = totals.setdefault(priority, [priority, 0, 0])
            band[1] += 1
            band[2] += gpus
        return sorted(totals.values(), reverse=True)


def place_new(bands: list[list[int]], priority: int, reason: str | None) -> QueuePosition:
    """Where a workload of `priority` that a line does not hold yet will stand: behind
    every workload of its priority or higher (`bands` as `Line.bands`)."""
    ahead = [(count, gpus) for band_priority, count, gpus in bands if band_priority >= priority]
    return QueuePosition(
        position=sum(count for count, _ in ahead) + 1,
        reason=reason or NOT_PLACED_YET,
        gpus_ahead=sum(gpus for _, gpus in ahead),
    )


class QueueLines:
    """Reads the published lines, by `_id` only."""

    def __init__(self, store: QueueLineStore) -> None:
        self._store = store

    async def place(
        self,
        item: WorkItem,
        doc: InstanceDoc | JobDoc,
        *,
        lines: dict[str, Line] | None = None,
        new: bool = False,
    ) -> QueuePosition | None:
        """Where a queued workload stands; None unless it is queued. A `new` one (just
        submitted) is placed from its tenant's priority bands alone (a few numbers, not
        the line); `lines` keeps each tenant's line read once for all the items of one
        page."""
        if doc["state"] not in (State.QUEUED, JobState.QUEUED):
            return None
        tenant_id, priority = doc["tenant_id"], doc.get("priority", 0)
        if new:
            return place_new(await self._store.bands(tenant_id), priority, None)
        lines = {} if lines is None else lines
        if tenant_id not in lines:
            lines[tenant_id] = Line.of(await self._store.line(tenant_id))
        return lines[tenant_id].position(str(item), priority, doc.get("queue_reason"))
