"""The admission queue's rule: priority within a tenant, weighted dominant-resource
fair share between tenants, quota and capacity as reasons to wait."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gpucloud_instances.queue.decision import Cap, CapKey, Queued, Running, TenantShare, decide

T0 = datetime(2026, 11, 1, tzinfo=UTC)
H100, A100 = "H100", "A100"


def flood(
    tenant: str, count: int, *, gpus: int = 1, gpu_type: str = H100, priority: int = 0
) -> list[Queued]:
    return [
        Queued(
            f"{tenant}/j{n}",
            tenant,
            gpu_type,
            gpus,
            priority,
            T0 + timedelta(seconds=n),
            may_borrow=True,
        )
        for n in range(count)
    ]


def share(max_gpus: int = 8, held: int = 0, weight: float = 1.0, borrow: int = 0) -> TenantShare:
    return TenantShare(max_gpus, 100, held, 0, {H100: held} if held else {}, weight, borrow)


def running(tenant: str, count: int, *, gpus: int = 1, priority: int = 0) -> list[Running]:
    """`count` admitted workloads of `tenant`, the later admitted the higher numbered."""
    return [
        Running(f"{tenant}/r{n}", tenant, H100, gpus, priority, T0 + timedelta(seconds=n))
        for n in range(count)
    ]


def admitted_by_tenant(admit: list[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for key in admit:
        tenant = key.split("/")[0]
        counts[tenant] = counts.get(tenant, 0) + 1
    return counts


def test_two_tenants_of_equal_weight_split_the_free_gpus_evenly() -> None:
    decision = decide(
        flood("a", 10) + flood("b", 10), {"a": share(), "b": share()}, {H100: 8}, {H100: 8}
    )
    assert admitted_by_tenant(decision.admit) == {"a": 4, "b": 4}
    assert decision.admit[:4] == ["a/j0", "b/j0", "a/j1", "b/j1"]  # alternating
    assert decision.waiting["a/j4"].reason == "capacity"
    assert decision.waiting["a/j4"].position == 1


def test_weights_split_the_gpus_in_proportion() -> None:
    decision = decide(
        flood("a", 10) + flood("b", 10),
        {"a": share(weight=3), "b": share(weight=1)},
        {H100: 8},
        {H100: 8},
    )
    assert admitted_by_tenant(decision.admit) == {"a": 6, "b": 2}


def test_a_tenant_already_holding_gpus_waits_for_the_one_holding_fewer() -> None:
    decision = decide(
        flood("a", 4) + flood("b", 4), {"a": share(held=4), "b": share()}, {H100: 4}, {H100: 8}
    )
    assert admitted_by_tenant(decision.admit) == {"b": 4}


def test_a_tenant_at_its_quota_waits_for_quota_while_others_go_on() -> None:
    decision = decide(
        flood("a", 3) + flood("b", 3), {"a": share(max_gpus=1), "b": share()}, {H100: 8}, {H100: 8}
    )
    assert admitted_by_tenant(decision.admit) == {"a": 1, "b": 3}
    assert decision.waiting["a/j1"].reason == "quota"
    assert decision.waiting["a/j2"].gpus_ahead == 1


def test_higher_priority_goes_first_within_a_tenant_and_the_rest_wait_for_it() -> None:
    queued = flood("a", 2) + flood("a", 1, priority=5)
    queued[-1] = Queued("a/urgent", "a", H100, 1, 5, T0 + timedelta(seconds=9))
    decision = decide(queued, {"a": share()}, {H100: 1}, {H100: 8})
    assert decision.admit == ["a/urgent"]
    assert decision.waiting["a/j0"].reason == "capacity"
    low = [Queued("a/low", "a", H100, 1, -1, T0)]
    later = decide(queued + low, {"a": share()}, {H100: 1}, {H100: 8})
    assert later.waiting["a/low"].reason == "priority"


def test_a_big_job_is_not_starved_by_smaller_ones_of_its_gpu_type() -> None:
    big = [Queued("a/big", "a", H100, 4, 0, T0)]
    decision = decide(
        big + flood("b", 3) + flood("c", 1, gpu_type=A100),
        {"a": share(), "b": share(), "c": share()},
        {H100: 3, A100: 1},
        {H100: 8, A100: 1},
    )
    # b's one-GPU jobs would fit, but the 4-GPU job of the same type is ahead.
    assert decision.admit == ["c/j0"]
    assert decision.waiting["a/big"].reason == "capacity"


def test_a_tenant_not_known_yet_waits() -> None:
    decision = decide(flood("ghost", 1), {}, {H100: 8}, {H100: 8})
    assert decision.admit == []
    assert decision.waiting["ghost/j0"].reason == "quota"


def test_a_tenant_borrows_idle_gpus_beyond_its_quota_up_to_its_limit() -> None:
    decision = decide(flood("b", 8), {"b": share(max_gpus=2, borrow=3)}, {H100: 8}, {H100: 8})
    assert decision.admit == ["b/j0", "b/j1", "b/j2", "b/j3", "b/j4"]
    assert decision.borrowing == {"b/j2", "b/j3", "b/j4"}
    assert decision.waiting["b/j5"].reason == "quota"


def test_guaranteed_work_goes_before_any_borrowing() -> None:
    # b has the lower share, but its next job is beyond its quota: a, within its
    # quota, takes the free GPUs first.
    decision = decide(
        flood("a", 2) + flood("b", 2),
        {"a": share(max_gpus=4, held=2), "b": share(max_gpus=1, held=1, borrow=4)},
        {H100: 2},
        {H100: 8},
    )
    assert decision.admit == ["a/j0", "a/j1"]
    assert decision.borrowing == set()
    assert decision.waiting["b/j0"].reason == "capacity"


def test_guaranteed_work_reclaims_borrowed_gpus_lowest_priority_and_newest_first() -> None:
    borrowed = [*running("b", 3, priority=0), Running("b/urgent", "b", H100, 1, 9, T0)]
    decision = decide(
        flood("a", 1, gpus=2),
        {"a": share(max_gpus=4), "b": share(max_gpus=2, held=6, borrow=4)},
        {H100: 0},
        {H100: 6},
        running=borrowed,
    )
    assert decision.admit == []
    assert decision.preempt == ["b/r2", "b/r1"]
    assert decision.waiting["a/j0"].reason == "reclaim"


def test_reclaim_stops_at_the_borrowers_quota() -> None:
    # b borrows 1 GPU only: reclaiming 2 would take its guaranteed share, so
    # nothing is preempted and a waits for capacity.
    decision = decide(
        flood("a", 1, gpus=2),
        {"a": share(max_gpus=4), "b": share(max_gpus=3, held=4, borrow=4)},
        {H100: 0},
        {H100: 4},
        running=running("b", 4),
    )
    assert decision.preempt == []
    assert decision.waiting["a/j0"].reason == "capacity"


def test_work_beyond_its_own_quota_reclaims_nothing() -> None:
    decision = decide(
        flood("a", 1),
        {"a": share(max_gpus=0, borrow=2), "b": share(max_gpus=0, held=2, borrow=2)},
        {H100: 0},
        {H100: 2},
        running=running("b", 2),
    )
    assert decision.preempt == []
    assert decision.waiting["a/j0"].reason == "capacity"


def test_gpus_being_freed_by_a_preemption_are_not_reclaimed_twice() -> None:
    tenants = {"a": share(max_gpus=4), "b": share(max_gpus=2, held=4, borrow=4)}
    first = decide(flood("a", 1, gpus=2), tenants, {H100: 0}, {H100: 4}, running=running("b", 4))
    assert first.preempt == ["b/r3", "b/r2"]
    gone = [r for r in running("b", 4) if r.key in first.preempt]
    still = [r for r in running("b", 4) if r.key not in first.preempt]
    again = decide(
        flood("a", 1, gpus=2), tenants, {H100: 0}, {H100: 4}, running=still, releasing=gone
    )
    assert again.preempt == []
    assert again.waiting["a/j0"].reason == "reclaim"


def test_borrowing_does_not_take_gpus_being_reclaimed() -> None:
    decision = decide(
        flood("a", 1, gpus=2) + flood("b", 1),
        {"a": share(max_gpus=4), "b": share(max_gpus=2, held=4, borrow=4)},
        {H100: 1},
        {H100: 5},
        running=running("b", 4),
    )
    assert decision.preempt == ["b/r3"]
    assert decision.admit == []
    assert decision.waiting["b/j0"].reason == "capacity"


def test_an_instance_never_borrows() -> None:
    instance = [Queued("b/i0", "b", H100, 1, 0, T0)]
    decision = decide(instance, {"b": share(max_gpus=1, held=1, borrow=4)}, {H100: 4}, {H100: 8})
    assert decision.admit == []
    assert decision.waiting["b/i0"].reason == "quota"


def test_a_multi_node_job_is_admitted_only_when_each_pod_has_a_node_of_its_own() -> None:
    gang = Queued("a/gang", "a", H100, 6, 0, T0, may_borrow=True, spread=2)
    small = Queued("b/small", "b", H100, 2, 0, T0 + timedelta(seconds=1))
    tenants = {"a": share(), "b": share()}

    # 6 GPUs free in all, but no node with 3: the gang waits, and holds the type's line.
    scattered = {H100: {"n1": 2, "n2": 2, "n3": 2}}
    waiting = decide([gang, small], tenants, {H100: 6}, {H100: 24}, node_free=scattered)
    assert waiting.admit == []
    assert waiting.waiting["a/gang"].reason == "capacity"
    # One roomy node is not enough either.
    one = {H100: {"n1": 6, "n2": 2, "n3": 2}}
    assert decide([gang], tenants, {H100: 10}, {H100: 24}, node_free=one).admit == []

    # Two nodes with 3 free each: admitted whole; the small job fits what is left.
    two = {H100: {"n1": 3, "n2": 4, "n3": 2}}
    decision = decide([gang, small], tenants, {H100: 9}, {H100: 24}, node_free=two)
    assert decision.admit == ["a/gang", "b/small"]


def test_a_user_at_their_own_limit_waits_while_another_user_of_the_tenant_is_admitted() -> None:
    ada = [
        Queued(f"a/ada{n}", "a", H100, 2, 0, T0 + timedelta(seconds=n), user_id="u-ada")
        for n in range(3)
    ]
    bob = [Queued("a/bob0", "a", H100, 2, 0, T0 + timedelta(seconds=9), user_id="u-bob")]
    decision = decide(
        ada + bob, {"a": share(max_gpus=8)}, {H100: 8}, {H100: 8},
        caps={("a", "user_limit", "u-ada"): Cap(max_gpus=4, held_gpus=2)},
    )  # fmt: skip
    # Ada holds 2 of her 4: one more of hers fits; her third waits behind it, and
    # Bob's, younger than all of hers, goes ahead of it.
    assert decision.admit == ["a/ada0", "a/bob0"]
    assert decision.waiting["a/ada1"].reason == "user_limit"
    assert decision.waiting["a/ada2"].reason == "user_limit"
    assert [decision.waiting[k].position for k in ("a/ada1", "a/ada2")] == [1, 2]


def test_a_user_limit_binds_only_the_users_of_its_tenant() -> None:
    queued = [
        Queued("a/x", "a", H100, 4, 0, T0, user_id="u-1"),
        Queued("b/x", "b", H100, 4, 0, T0, user_id="u-1"),
    ]
    decision = decide(
        queued, {"a": share(), "b": share()}, {H100: 8}, {H100: 8},
        caps={("a", "user_limit", "u-1"): Cap(max_gpus=2, held_gpus=0)},
    )  # fmt: skip
    assert decision.admit == ["b/x"]
    assert decision.waiting["a/x"].reason == "user_limit"


def test_a_project_at_its_share_waits_while_another_project_of_the_tenant_goes() -> None:
    def job(key: str, project: str, second: int, gpus: int = 2) -> Queued:
        return Queued(
            f"a/{key}", "a", H100, gpus, 0, T0 + timedelta(seconds=second), may_borrow=True,
            project=project,
        )  # fmt: skip

    queued = [job("v0", "vision", 0), job("v1", "vision", 1), job("v2", "vision", 2),
              job("d0", "default", 9), job("n0", "nlp", 10, gpus=4)]  # fmt: skip
    decision = decide(
        queued, {"a": share(max_gpus=16)}, {H100: 16}, {H100: 16},
        caps={
            ("a", "project_quota", "vision"): Cap(max_gpus=2, held_gpus=0, borrow_gpus=2),
            ("a", "project_quota", "nlp"): Cap(max_gpus=2, held_gpus=0),
        },
    )  # fmt: skip
    # Vision's jobs take its share of 2 and borrow 2 more; its third waits and the
    # younger default job goes ahead of it. Nlp's job is larger than its share and
    # borrows nothing: it waits too.
    assert decision.admit == ["a/v0", "a/v1", "a/d0"]
    assert decision.waiting["a/v2"].reason == "project_quota"
    assert decision.waiting["a/n0"].reason == "project_quota"


def test_an_instance_never_borrows_past_its_projects_share() -> None:
    queued = [Queued("a/i0", "a", H100, 4, 0, T0, project="vision")]
    caps: dict[CapKey, Cap] = {("a", "project_quota", "vision"): Cap(2, 0, borrow_gpus=8)}
    decision = decide(queued, {"a": share()}, {H100: 8}, {H100: 8}, caps=caps)
    assert decision.waiting["a/i0"].reason == "project_quota"
