"""A few seconds of memory for what the gateway reads on every request."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class TtlCache(Generic[K, V]):
    """Values kept for `ttl_s`; a full cache starts over rather than tracking age."""

    def __init__(self, ttl_s: float, *, max_entries: int = 50_000) -> None:
        self._ttl_s = ttl_s
        self._max_entries = max_entries
        self._entries: dict[K, tuple[float, V]] = {}

    async def get(self, key: K, load: Callable[[K], Awaitable[V]]) -> V:
        hit = self._entries.get(key)
        if hit is not None and hit[0] > time.monotonic():
            return hit[1]
        value = await load(key)
        if len(self._entries) >= self._max_entries:
            self._entries.clear()
        self._entries[key] = (time.monotonic() + self._ttl_s, value)
        return value

    def forget(self, key: K) -> None:
        self._entries.pop(key, None)
