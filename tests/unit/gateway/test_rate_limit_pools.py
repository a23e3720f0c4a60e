"""Rate-limit buckets: one pool per kind, and IPv6 clients counted by their /64."""

from __future__ import annotations

import pytest

from gpucloud_gateway.address_guard import address_key
from gpucloud_gateway.ratelimit import RateLimiter
from gpucloud_libs.errors import RateLimited


def test_a_flood_of_addresses_cannot_evict_an_emails_sign_in_bucket() -> None:
    limiter = RateLimiter(max_buckets_per_kind=10)
    for _ in range(2):
        limiter.take("login:ada@example.com", rate=0.001, burst=2, what="signing in as ada")
    # Many more addresses than the pool holds: their own pool turns over, not ada's.
    for n in range(50):
        limiter.take(f"sign-in:192.0.2.{n}", rate=1.0, burst=5, what="this address")
    with pytest.raises(RateLimited):
        limiter.take("login:ada@example.com", rate=0.001, burst=2, what="signing in as ada")


def test_a_pool_drops_its_least_recently_used_bucket() -> None:
    limiter = RateLimiter(max_buckets_per_kind=2)
    limiter.take("key:a", rate=0.001, burst=1, what="key a")
    limiter.take("key:b", rate=0.001, burst=1, what="key b")
    limiter.take("key:c", rate=0.001, burst=1, what="key c")  # a, the oldest, goes
    limiter.take("key:a", rate=0.001, burst=1, what="key a")  # full again: a new bucket
    with pytest.raises(RateLimited):
        limiter.take("key:c", rate=0.001, burst=1, what="key c")


@pytest.mark.parametrize(
    ("address", "counted_as"),
    [
        ("2001:db8:0:1::1", "2001:db8:0:1::/64"),
        ("2001:db8:0:1:ffff:ffff:ffff:ffff", "2001:db8:0:1::/64"),
        ("2001:db8:0:2::1", "2001:db8:0:2::/64"),
        ("::ffff:192.0.2.7", "192.0.2.7"),
        ("192.0.2.7", "192.0.2.7"),
        ("not-an-address", "not-an-address"),
    ],
)
def test_an_ipv6_client_counts_as_its_slash_64(address: str, counted_as: str) -> None:
    assert address_key(address) == counted_as
