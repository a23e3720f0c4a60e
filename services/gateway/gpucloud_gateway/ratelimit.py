"""Token-bucket rate limits, per API key and per tenant, held in the gateway's memory.

A shared counter would need a read-modify-write per request, which the
MongoDB-wire backend cannot do concurrently without losing updates, and a
network hop that would double the gateway's overhead. So each replica keeps
its own buckets: with N replicas behind a balancer, a caller's effective limit
is up to N times the configured one. Size limits with that in mind
(docs/decisions.md).
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from dataclasses import dataclass

from gpucloud_libs.errors import RateLimited

#: Buckets kept of each kind (the key's part before its first ":": `key`, `tenant`,
#: `login`, `sign-in`, `failed-auth`); the least recently used go first (a full bucket
#: is the default anyway). Each kind has its own pool, so a flood of one kind (many
#: addresses, say) cannot evict another's half-empty buckets (an email's sign-ins).
MAX_BUCKETS_PER_KIND = 100_000


@dataclass
class _Bucket:
    tokens: float
    updated: float


class RateLimiter:
    def __init__(self, *, max_buckets_per_kind: int = MAX_BUCKETS_PER_KIND) -> None:
        self._max = max_buckets_per_kind
        self._pools: dict[str, OrderedDict[str, _Bucket]] = {}

    def take(self, key: str, *, rate: float, burst: int, what: str) -> None:
        """Spend one token from `key`'s bucket, or raise 429 saying when to come back."""
        bucket = self._refilled(key, rate=rate, burst=burst)
        _refuse_if_empty(bucket, rate=rate, burst=burst, what=what)
        bucket.tokens -= 1.0

    def check(self, key: str, *, rate: float, burst: int, what: str) -> None:
        """Raise 429 if `key`'s bucket is empty, spending nothing: a guard whose tokens
        are spent afterwards, by the requests that fail (`spend`)."""
        _refuse_if_empty(
            self._refilled(key, rate=rate, burst=burst), rate=rate, burst=burst, what=what
        )

    def spend(self, key: str, *, rate: float, burst: int) -> None:
        """Spend one token whether or not one is left (down to empty, never below)."""
        bucket = self._refilled(key, rate=rate, burst=burst)
        bucket.tokens = max(0.0, bucket.tokens - 1.0)

    def _refilled(self, key: str, *, rate: float, burst: int) -> _Bucket:
        now = time.monotonic()
        pool = self._pools.setdefault(key.partition(":")[0], OrderedDict())
        bucket = pool.pop(key, None) or _Bucket(tokens=float(burst), updated=now)
        bucket.tokens = min(float(burst), bucket.tokens + (now - bucket.updated) * rate)
        bucket.updated = now
        pool[key] = bucket
        if len(pool) > self._max:
            pool.popitem(last=False)
        return bucket


def _refuse_if_empty(bucket: _Bucket, *, rate: float, burst: int, what: str) -> None:
    if bucket.tokens < 1.0:
        wait_s = math.ceil((1.0 - bucket.tokens) / rate)
        raise RateLimited(
            f"{what} allows {rate:g} requests/s (bursts of {burst}); retry in {wait_s} s",
            retry_after_s=wait_s,
            limit=what,
        )
