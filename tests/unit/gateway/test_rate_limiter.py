"""The token buckets behind every rate limit (ratelimit.py), on a clock the test moves:
a burst, then the steady rate; when to come back; a check that spends nothing and a
spend that never goes below empty; one caller's bucket apart from another's."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from gpucloud_gateway import ratelimit
from gpucloud_gateway.ratelimit import RateLimiter
from gpucloud_libs.errors import RateLimited


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """The limiter's clock alone, not the process's."""
    moved = Clock()
    monkeypatch.setattr(ratelimit, "time", SimpleNamespace(monotonic=moved.monotonic))
    return moved


def take(limiter: RateLimiter, key: str = "key:k1", *, rate: float = 1.0, burst: int = 3) -> None:
    limiter.take(key, rate=rate, burst=burst, what="this API key")


def takes(
    limiter: RateLimiter, count: int, key: str = "key:k1", *, rate: float = 1.0, burst: int = 3
) -> int:
    """How many of `count` requests the bucket lets through."""
    taken = 0
    for _ in range(count):
        try:
            take(limiter, key, rate=rate, burst=burst)
        except RateLimited:
            continue
        taken += 1
    return taken


def test_a_full_bucket_takes_its_burst_then_refuses(clock: Clock) -> None:
    limiter = RateLimiter()
    assert takes(limiter, 10) == 3
    clock.advance(0.999)
    assert takes(limiter, 1) == 0
    clock.advance(0.001)  # one second at 1/s: one token
    assert takes(limiter, 5) == 1


def test_a_bucket_refills_at_its_rate_up_to_its_burst(clock: Clock) -> None:
    limiter = RateLimiter()
    assert takes(limiter, 3, rate=2.0) == 3
    clock.advance(1.0)  # two tokens
    assert takes(limiter, 5, rate=2.0) == 2
    clock.advance(3600)  # an hour idle: full again, and no fuller
    assert takes(limiter, 10, rate=2.0) == 3


def test_a_refusal_says_when_to_come_back(clock: Clock) -> None:
    limiter = RateLimiter()
    for _ in range(2):
        limiter.take("tenant:t-a", rate=0.25, burst=2, what="this tenant")
    with pytest.raises(RateLimited) as refused:
        limiter.take("tenant:t-a", rate=0.25, burst=2, what="this tenant")
    error = refused.value
    assert error.status == 429
    assert error.detail == "this tenant allows 0.25 requests/s (bursts of 2); retry in 4 s"
    assert error.extensions == {"retry_after_s": 4, "limit": "this tenant"}


def test_the_wait_counts_what_has_refilled_already(clock: Clock) -> None:
    limiter = RateLimiter()
    limiter.take("key:k1", rate=0.1, burst=1, what="this API key")
    clock.advance(7.5)  # three quarters of a token
    with pytest.raises(RateLimited) as refused:
        limiter.take("key:k1", rate=0.1, burst=1, what="this API key")
    assert refused.value.extensions["retry_after_s"] == 3  # 2.5 s, rounded up


def test_a_check_spends_nothing(clock: Clock) -> None:
    limiter = RateLimiter()
    for _ in range(50):
        limiter.check("failed-auth:192.0.2.7", rate=1.0, burst=1, what="this address")
    limiter.take("failed-auth:192.0.2.7", rate=1.0, burst=1, what="this address")
    with pytest.raises(RateLimited):
        limiter.check("failed-auth:192.0.2.7", rate=1.0, burst=1, what="this address")


def test_a_spend_empties_the_bucket_but_never_below_empty(clock: Clock) -> None:
    limiter = RateLimiter()
    for _ in range(20):  # twenty failures against a burst of two
        limiter.spend("failed-auth:192.0.2.7", rate=1.0, burst=2)
    with pytest.raises(RateLimited):
        limiter.check("failed-auth:192.0.2.7", rate=1.0, burst=2, what="this address")
    clock.advance(1.0)  # one token, not one eighteenth of a token
    limiter.check("failed-auth:192.0.2.7", rate=1.0, burst=2, what="this address")


def test_one_callers_empty_bucket_leaves_every_other_full(clock: Clock) -> None:
    limiter = RateLimiter()
    assert takes(limiter, 5, "key:k1") == 3
    assert takes(limiter, 5, "key:k2") == 3
    assert takes(limiter, 5, "tenant:k1") == 3  # the same id as another kind's
    assert takes(limiter, 1, "key:k1") == 0


def test_a_bucket_made_for_a_bigger_burst_is_clamped_to_the_burst_asked_now(clock: Clock) -> None:
    """A tenant whose burst the platform admin lowered gets the new burst at once."""
    limiter = RateLimiter()
    take(limiter, "tenant:t-a", burst=100)
    assert takes(limiter, 10, "tenant:t-a", burst=3) == 3
