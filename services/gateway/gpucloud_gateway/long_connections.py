"""Tunnels and instance WebSockets stay open for hours; what keeps them in bounds
(review M7). Per gateway replica:

- a tenant holds at most `long_connections_per_tenant` at once; one more is refused at
  the handshake (429);
- every `long_connection_recheck_s` the caller is checked again as at the handshake:
  a revoked key, a disabled user, a suspended or deleted tenant, or an instance that no
  longer serves the port closes the connection (1008, with the reason). A check that
  cannot be made (an outage, a 5xx, no answer within the interval) is not a refusal: the
  connection stays for up to `UNCHECKED_GRACE_S`, then closes (1011), since a refusal
  might be among what could not be read;
- one with no bytes either way for `long_connection_idle_s`, or open for
  `long_connection_max_s`, is closed (1001);
- a message larger than `websocket_max_message_bytes` either way closes it (1009).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from gpucloud_libs.errors import GpucloudError, RateLimited

from .settings import GatewaySettings

#: A close frame's reason holds at most 123 bytes.
REASON_BYTES = 120
POLICY_VIOLATION, GOING_AWAY, UNAVAILABLE = 1008, 1001, 1011
#: How long a connection stays open while its caller cannot be checked.
UNCHECKED_GRACE_S = 30.0


class Closable(Protocol):
    """The client's end: a WebSocket."""

    async def close(self, code: int = 1000, reason: str | None = None) -> None: ...


@dataclass
class Activity:
    """When bytes last went either way; the pumps touch it."""

    last: float = field(default_factory=time.monotonic)

    def touch(self) -> None:
        self.last = time.monotonic()


class LongConnections:
    def __init__(self, settings: GatewaySettings) -> None:
        self._per_tenant = settings.long_connections_per_tenant
        self._recheck_s = settings.long_connection_recheck_s
        self._idle_s = settings.long_connection_idle_s
        self._max_s = settings.long_connection_max_s
        self._unchecked_grace_s = UNCHECKED_GRACE_S
        self._open: Counter[str] = Counter()

    def open_count(self, tenant_id: str) -> int:
        return self._open[tenant_id]

    @contextlib.contextmanager
    def slot(self, tenant_id: str) -> Iterator[None]:
        """One of the tenant's connections, for as long as the block runs."""
        if self._open[tenant_id] >= self._per_tenant:
            raise RateLimited(
                f"this tenant has {self._per_tenant} tunnels and WebSockets open on this "
                "gateway, the most it may; close one first",
                retry_after_s=int(self._recheck_s) or 1,
                limit="open tunnels and WebSockets",
            )
        self._open[tenant_id] += 1
        try:
            yield
        finally:
            self._open[tenant_id] -= 1
            if self._open[tenant_id] <= 0:
                del self._open[tenant_id]

    async def hold(
        self,
        socket: Closable,
        pump: Callable[[Activity], Awaitable[None]],
        recheck: Callable[[], Awaitable[None]],
    ) -> None:
        """Run `pump` until it ends, or until `recheck` raises, the connection idles or
        grows too old: then stop it and close the socket saying why."""
        activity, opened = Activity(), time.monotonic()
        task = asyncio.ensure_future(pump(activity))
        code, reason = POLICY_VIOLATION, ""
        unchecked_since: float | None = None
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=self._recheck_s)
                if done:
                    task.result()
                    return
                now = time.monotonic()
                if now - activity.last >= self._idle_s:
                    code, reason = GOING_AWAY, f"idle for {self._idle_s:g} s"
                elif now - opened >= self._max_s:
                    code, reason = GOING_AWAY, f"open for {self._max_s:g} s, the most allowed"
                else:
                    try:
                        await asyncio.wait_for(recheck(), self._recheck_s)
                        unchecked_since = None
                        continue
                    except GpucloudError as error:
                        if error.status < 500:  # a refusal
                            code, reason = POLICY_VIOLATION, error.detail
                            break
                    except TimeoutError:
                        pass
                    if unchecked_since is None:
                        unchecked_since = now
                    if now - unchecked_since < self._unchecked_grace_s:
                        continue
                    code, reason = UNAVAILABLE, "the caller could not be checked again; reconnect"
                break
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        with contextlib.suppress(RuntimeError, OSError):
            await socket.close(
                code=code, reason=reason.encode()[:REASON_BYTES].decode(errors="ignore")
            )


async def both_ways(
    one: Awaitable[None], other: Awaitable[None], *, quiet: tuple[type[BaseException], ...]
) -> set[asyncio.Task[None]]:
    """Pump both directions until either ends; the other is cancelled, also when the
    connection is ended from outside (`hold`). Returns the tasks that ended, whose
    results the caller reads; `quiet`: what a cancelled direction may raise as it goes."""
    tasks = [asyncio.ensure_future(one), asyncio.ensure_future(other)]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, *quiet):
                    await task
    return done
