"""What an answer's time went to, as a `Server-Timing` header (W3C Server Timing):
browsers' developer tools show it, and the start benchmark splits an admission
with it. A handler marks its phases with `phase(name)`; a request that marked
none gets no header.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator
from contextvars import ContextVar

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

HEADER = "server-timing"

_phases: ContextVar[list[tuple[str, float]] | None] = ContextVar("server_timing", default=None)


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    """Time the block as `name` (a token: letters, digits, `-` and `_`)."""
    phases = _phases.get()
    started = time.perf_counter()
    try:
        yield
    finally:
        if phases is not None:
            phases.append((name, (time.perf_counter() - started) * 1000))


_OUTSIDE_QUOTES = re.compile(r'(?:[^,"]|"[^"]*")+')


def parse(header: str) -> dict[str, float]:
    """The phases of a `Server-Timing` header, in milliseconds."""
    durations: dict[str, float] = {}
    # Metrics are split on the commas outside quoted values (`desc="a, b"`).
    for metric in filter(None, (part.strip() for part in _OUTSIDE_QUOTES.findall(header))):
        name, *params = (item.strip() for item in metric.split(";"))
        for param in params:
            key, _, value = param.partition("=")
            if key == "dur":
                durations[name] = float(value)
    return durations


class ServerTimingMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        phases: list[tuple[str, float]] = []
        token = _phases.set(phases)

        async def send_with_timing(message: Message) -> None:
            if message["type"] == "http.response.start" and phases:
                MutableHeaders(scope=message).append(
                    HEADER, ", ".join(f"{name};dur={ms:.1f}" for name, ms in phases)
                )
            await send(message)

        try:
            await self.app(scope, receive, send_with_timing)
        finally:
            _phases.reset(token)
