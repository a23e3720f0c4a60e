"""Fire-and-forget work that must not delay a response (a key's last use, an audit publish)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable

log = logging.getLogger(__name__)


class Background:
    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, work: Awaitable[None]) -> None:
        """Run `work` without waiting for it; failures are logged."""

        async def run() -> None:
            try:
                await work
            except Exception:
                log.exception("background work failed")

        task = asyncio.get_running_loop().create_task(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
