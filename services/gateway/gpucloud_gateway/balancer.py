"""Which replica of an inference service takes the next request.

Least outstanding requests: the replica with the fewest requests this gateway
replica has in flight to it, ties broken at random (so at low load requests
still spread evenly). A replica that refused a connection is passed over for
a short cool-down, unless every replica is cooling: the endpoint list is a
second old at most, and a replica that just started may not listen yet.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from contextlib import contextmanager


class ReplicaBalancer:
    def __init__(self, *, cooldown_s: float) -> None:
        self._cooldown_s = cooldown_s
        self._in_flight: dict[str, int] = {}
        self._cooling_until: dict[str, float] = {}

    def pick(self, addresses: list[str], *, tried: set[str]) -> str | None:
        """The least busy replica of `addresses` not yet `tried` for this request."""
        untried = [address for address in addresses if address not in tried]
        if not untried:
            return None
        clock = time.monotonic()
        warm = [a for a in untried if self._cooling_until.get(a, 0.0) <= clock]
        candidates = warm or untried
        least = min(self._in_flight.get(address, 0) for address in candidates)
        return random.choice(
            [address for address in candidates if self._in_flight.get(address, 0) == least]
        )

    @contextmanager
    def track(self, address: str) -> Iterator[None]:
        """Count a request to `address` as outstanding until its response has ended."""
        self._in_flight[address] = self._in_flight.get(address, 0) + 1
        try:
            yield
        finally:
            left = self._in_flight[address] - 1
            if left:
                self._in_flight[address] = left
            else:
                del self._in_flight[address]

    def refused(self, address: str) -> None:
        self._cooling_until[address] = time.monotonic() + self._cooldown_s
        if len(self._cooling_until) > 10_000:  # forget replicas long gone
            clock = time.monotonic()
            self._cooling_until = {a: t for a, t in self._cooling_until.items() if t > clock}

    def in_flight(self, address: str) -> int:
        return self._in_flight.get(address, 0)
