"""The gateway's choice of replica: least outstanding requests, cool-down after a refusal."""

from __future__ import annotations

from collections import Counter

from gpucloud_gateway.balancer import ReplicaBalancer

REPLICAS = ["127.1.0.1", "127.1.0.2", "127.1.0.3"]


def test_the_least_busy_replica_takes_the_next_request() -> None:
    balancer = ReplicaBalancer(cooldown_s=2.0)
    with balancer.track("127.1.0.1"), balancer.track("127.1.0.1"), balancer.track("127.1.0.2"):
        assert balancer.pick(REPLICAS, tried=set()) == "127.1.0.3"
        assert balancer.pick(REPLICAS, tried={"127.1.0.3"}) == "127.1.0.2"
    assert balancer.in_flight("127.1.0.1") == 0


def test_idle_replicas_share_requests_evenly() -> None:
    balancer = ReplicaBalancer(cooldown_s=2.0)
    picks = Counter(balancer.pick(REPLICAS, tried=set()) for _ in range(3000))
    assert set(picks) == set(REPLICAS)
    assert all(abs(count - 1000) < 150 for count in picks.values()), picks


def test_a_refusing_replica_cools_down_unless_all_do() -> None:
    balancer = ReplicaBalancer(cooldown_s=60.0)
    balancer.refused("127.1.0.1")
    assert {balancer.pick(REPLICAS, tried=set()) for _ in range(200)} == set(REPLICAS[1:])
    for address in REPLICAS[1:]:
        balancer.refused(address)
    assert balancer.pick(REPLICAS, tried=set()) in REPLICAS  # all cooling: still tried
    assert balancer.pick(REPLICAS, tried=set(REPLICAS)) is None
