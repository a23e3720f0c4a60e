"""The controller's work queue: each item is reconciled by one worker at a time.

Items are named in ..wakeups. A wake-up for an item already queued is merged; one for an item a worker is
busy with runs it once more when that worker is done, so the last change is
always seen and an item never runs twice at once (the worker is the single
writer of its documents).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from opentelemetry import metrics

from gpucloud_libs.errors import DependencyUnavailable
from gpucloud_libs.kube import KubeError

from ..wakeups import WorkItem

log = logging.getLogger(__name__)

SLOW_RECONCILE_S = 1.0
#: A failure to reach a dependency retries soon; a crash waits longer.
RETRY_TRANSIENT_S = 1.0
RETRY_CRASH_S = 5.0


class WorkQueue:
    def __init__(self) -> None:
        self._queue: asyncio.Queue[WorkItem] = asyncio.Queue()
        self._queued: set[WorkItem] = set()
        self._active: set[WorkItem] = set()  # items a worker is reconciling now
        self._again: set[WorkItem] = set()  # woken while active: run once more after
        self._soon: set[WorkItem] = set()  # a wake_soon is due
        self.accepting = False  # only the leader's queue takes work
        self._seconds = metrics.get_meter("gpucloud.instances.controller").create_histogram(
            "gpucloud.reconcile.duration", unit="s", description="Time to reconcile one item"
        )

    def wake(self, item: WorkItem) -> bool:
        """Reconcile `item` soon; False (and ignored) unless this replica leads."""
        if not self.accepting:
            return False
        if item in self._active:
            self._again.add(item)
        elif item not in self._queued:
            self._queued.add(item)
            self._queue.put_nowait(item)
        return True

    def wake_later(self, delay_s: float, item: WorkItem) -> None:
        asyncio.get_running_loop().call_later(delay_s, self.wake, item)

    def wake_soon(self, item: WorkItem, delay_s: float) -> None:
        """Reconcile `item` in `delay_s`, once for all the calls made meanwhile: a burst
        of changes makes one pass, after the burst instead of during it."""
        if item in self._soon:
            return
        self._soon.add(item)

        def due() -> None:
            self._soon.discard(item)
            self.wake(item)

        asyncio.get_running_loop().call_later(delay_s, due)

    async def work(self, index: int, handle: Callable[[WorkItem], Awaitable[None]]) -> None:
        """One worker: forever take an item and `handle` it."""
        while True:
            item = await self._queue.get()
            self._queued.discard(item)
            self._active.add(item)
            started = time.perf_counter()
            try:
                await handle(item)
            except (KubeError, DependencyUnavailable) as error:
                log.warning(
                    "reconcile failed; will retry", extra={"item": str(item), "error": str(error)}
                )
                self.wake_later(RETRY_TRANSIENT_S, item)
            except Exception:
                log.exception("reconcile crashed", extra={"item": str(item), "worker": index})
                self.wake_later(RETRY_CRASH_S, item)
            finally:
                elapsed = time.perf_counter() - started
                self._seconds.record(elapsed, {"kind": item.kind.value})
                if elapsed > SLOW_RECONCILE_S:
                    log.warning(
                        "slow reconcile", extra={"item": str(item), "seconds": round(elapsed, 2)}
                    )
                self._active.discard(item)
                if item in self._again:
                    self._again.discard(item)
                    self.wake(item)
