"""A few seconds of memory for what the gateway reads on every request."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class TtlCache(Generic[K, V]):
    """Values kept for `ttl_s`, the least recently used dropped first when full.

    An absent value (None: an unknown key or user) is not kept, so a flood of made-up
    credentials cannot push out the entries that real callers use (review M8); the
    failed authentications it causes are limited per client address instead
    (address_guard.py).
    """

    def __init__(self, ttl_s: float, *, max_entries: int = 50_000) -> None:
        self._ttl_s = ttl_s
        self._max_entries = max_entries
        self._entries: OrderedDict[K, tuple[float, V]] = OrderedDict()

    async def get(self, key: K, load: Callable[[K], Awaitable[V]]) -> V:
        hit = self._entries.get(key)
        if hit is not None and hit[0] > time.monotonic():
            self._entries.move_to_end(key)
            return hit[1]
        value = await load(key)
        if value is None:
            self._entries.pop(key, None)
            return value
        self._entries[key] = (time.monotonic() + self._ttl_s, value)
        self._entries.move_to_end(key)
        while len(self._entries) > self._max_entries:
            self._entries.popitem(last=False)
        return value

    def forget(self, key: K) -> None:
        self._entries.pop(key, None)
