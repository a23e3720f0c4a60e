"""The workload cache (workloads/cache.py, WorkloadCache), the one copy in memory of
the instance documents, written through by the store:
- where one replica runs, pages as the store would give them (one tenant, in `_id`
  order, filtered, after a cursor), kept by the process's own writes; a write made
  during the start-up fill wins over what the fill read; a failed write is read again
  before it is served;
- the controller trusts what it read or wrote until told of a change from outside,
  and with several replicas holds only its live instances;
- readers waiting on an instance and observers are handed each write."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any, cast

from gpucloud_instances.documents import InstanceDoc
from gpucloud_instances.workloads.cache import WorkloadCache


def an_instance(
    key: str, state: str = "running", spec_name: str = "h100-1", **fields: Any
) -> InstanceDoc:
    tenant, _, instance = key.partition("/")
    doc = {
        "_id": key, "tenant_id": tenant, "instance_id": instance, "state": state,
        "spec_name": spec_name, **fields,
    }  # fmt: skip
    return cast(InstanceDoc, doc)


def keys(docs: Iterable[InstanceDoc]) -> list[str]:
    return [doc["_id"] for doc in docs]


async def filled(*docs: InstanceDoc) -> WorkloadCache:
    model = WorkloadCache(complete=True)

    async def every_instance() -> list[InstanceDoc]:
        return list(docs)

    await model.fill(every_instance)
    return model


def page(model: WorkloadCache, tenant: str, **query: Any) -> list[str]:
    wanted = {"states": None, "spec_name": None, "after": None, "limit": 100, **query}
    return keys(model.page(tenant, **wanted))


async def test_a_page_holds_one_tenants_instances_in_id_order() -> None:
    model = await filled(
        an_instance("acme/c"), an_instance("zeta/a"), an_instance("acme/a"), an_instance("acme/b")
    )
    assert model.ready
    assert page(model, "acme") == ["acme/a", "acme/b", "acme/c"]
    assert page(model, "zeta") == ["zeta/a"]
    assert page(model, "nobody") == []
    assert sorted(model.tenants()) == ["acme", "zeta"]


async def test_a_page_goes_on_after_its_cursor_up_to_its_limit() -> None:
    model = await filled(*(an_instance(f"acme/i{n}") for n in range(5)))
    assert page(model, "acme", limit=2) == ["acme/i0", "acme/i1"]
    assert page(model, "acme", after="acme/i1", limit=2) == ["acme/i2", "acme/i3"]
    assert page(model, "acme", after="acme/i4") == []
    # A cursor need not be a key held: the page starts after where it would stand.
    assert page(model, "acme", after="acme/i2x") == ["acme/i3", "acme/i4"]


async def test_a_page_keeps_the_states_and_spec_asked_for_and_fills_its_limit() -> None:
    model = await filled(
        an_instance("acme/a", "running"), an_instance("acme/b", "stopped"),
        an_instance("acme/c", "running", "l40s"), an_instance("acme/d", "failed"),
        an_instance("acme/e", "running"),
    )  # fmt: skip
    assert page(model, "acme", states=["running", "failed"]) == [
        "acme/a",
        "acme/c",
        "acme/d",
        "acme/e",
    ]
    assert page(model, "acme", spec_name="h100-1", states=["running"], limit=2) == [
        "acme/a",
        "acme/e",
    ]
    assert page(model, "acme", spec_name="l40s") == ["acme/c"]


async def test_a_page_leaves_out_the_unpublished_events() -> None:
    model = await filled(an_instance("acme/a", outbox=[{"id": "acme/a#1"}], has_outbox=True))
    [doc] = model.page("acme", states=None, spec_name=None, after=None, limit=10)
    assert "outbox" not in doc
    assert doc["has_outbox"] is True


async def test_a_written_instance_is_served_as_written_and_a_deleted_one_not_at_all() -> None:
    model = await filled(an_instance("acme/a"))
    model.written(an_instance("acme/b", "pending"))
    model.written(an_instance("acme/a", "stopped"))
    assert page(model, "acme") == ["acme/a", "acme/b"]
    got = model.get("acme/a")
    assert got is not None
    assert got["state"] == "stopped"
    model.written(an_instance("acme/a", "deleted"))
    model.written(an_instance("acme/b", "deleted"))
    assert (model.get("acme/a"), page(model, "acme"), model.tenants()) == (None, [], [])


async def test_fields_set_by_the_store_are_merged_into_the_copy() -> None:
    model = await filled(an_instance("acme/a", node=None))
    model.merge("acme/a", {"state": "scheduled", "node": "h1"})
    got = model.get("acme/a")
    assert got is not None
    assert (got["state"], got["node"], got["spec_name"]) == ("scheduled", "h1", "h100-1")
    model.merge("acme/unknown", {"state": "running"})  # not held: nothing to merge into
    assert model.get("acme/unknown") is None
    assert model.take_unsure() == []


async def test_a_removed_instance_leaves_its_tenants_list() -> None:
    model = await filled(an_instance("acme/a"), an_instance("acme/b"))
    model.removed("acme/a")
    assert page(model, "acme") == ["acme/b"]
    model.removed("acme/b")
    model.removed("acme/b")  # twice is harmless
    assert model.tenants() == []


async def test_an_instance_whose_write_failed_is_read_again_before_it_is_served() -> None:
    model = await filled(an_instance("acme/a"), an_instance("acme/b"))
    model.forget("acme/a")
    model.forget("acme/b")
    assert sorted(model.take_unsure()) == ["acme/a", "acme/b"]
    assert model.take_unsure() == []  # handed out once
    model.refreshed("acme/a", an_instance("acme/a", "failed"))
    model.refreshed("acme/b", None)  # the store has it no more
    assert page(model, "acme", states=["failed"]) == ["acme/a"]
    assert model.get("acme/b") is None


async def test_a_later_successful_write_settles_an_unsure_instance() -> None:
    model = await filled(an_instance("acme/a"))
    model.forget("acme/a")
    model.written(an_instance("acme/a", "stopping"))
    assert model.take_unsure() == []


async def test_a_write_made_during_the_fill_wins_over_what_the_fill_read() -> None:
    model = WorkloadCache(complete=True)

    async def every_instance() -> list[InstanceDoc]:
        # What the store answered was read before these writes landed.
        model.written(an_instance("acme/a", "stopping"))
        model.removed("acme/b")
        model.merge("acme/c", {"state": "failed"})  # not held yet: unsure
        return [an_instance("acme/a", "running"), an_instance("acme/b"), an_instance("acme/c")]

    ready_before = model.ready
    await model.fill(every_instance)
    assert (ready_before, model.ready) == (False, True)
    got = model.get("acme/a")
    assert got is not None
    assert got["state"] == "stopping"
    assert model.get("acme/b") is None
    # Which of the fill's read and the merge came last is unknown: read again.
    assert model.take_unsure() == ["acme/c"]
    assert page(model, "acme") == ["acme/a"]
    model.refreshed("acme/c", an_instance("acme/c", "failed"))
    # The fill is over: writes are now plain writes.
    model.written(an_instance("acme/b", "pending"))
    assert page(model, "acme") == ["acme/a", "acme/b", "acme/c"]


# --- the controller's trust -----------------------------------------------------------

STOP = {"_id": "acme/a|stop", "reason": "budget"}


def a_live(key: str = "acme/a", state: str = "running", **fields: Any) -> InstanceDoc:
    return an_instance(key, state, admitted=True, sequence=3, **fields)


def read_by_controller(
    cache: WorkloadCache, doc: InstanceDoc | None, stop: dict[str, Any] | None = None
) -> None:
    key = "acme/a" if doc is None else doc["_id"]
    with cache.reading(key) as keep:
        keep(doc, stop)


def test_the_controller_trusts_nothing_it_has_not_read_and_then_its_own_writes() -> None:
    cache = WorkloadCache(complete=True)
    cache.written(a_live())  # the API's insert: held for lists, not yet the controller's
    assert cache.controller_view("acme/a") is None
    read_by_controller(cache, a_live())
    assert cache.controller_view("acme/a") == (a_live(), None)
    cache.merge("acme/a", {"pod_ip": "10.0.0.7"})
    assert cache.controller_view("acme/a") == ({**a_live(), "pod_ip": "10.0.0.7"}, None)


def test_a_change_from_outside_makes_the_controller_read_again() -> None:
    cache = WorkloadCache(complete=True)
    read_by_controller(cache, a_live())
    cache.forget("acme/a")  # a stop request was recorded
    assert cache.controller_view("acme/a") is None
    read_by_controller(cache, a_live(), STOP)
    assert cache.controller_view("acme/a") == (a_live(), STOP)


def test_what_a_read_brings_is_not_kept_when_a_change_was_told_meanwhile() -> None:
    cache = WorkloadCache(complete=False)
    with cache.reading("acme/a") as keep:
        cache.forget("acme/a")  # told while the read was in flight
        keep(a_live(), None)
    assert cache.controller_view("acme/a") is None
    read_by_controller(cache, a_live(), STOP)  # the next read is kept
    assert cache.controller_view("acme/a") == (a_live(), STOP)


def test_a_failed_write_is_read_again_by_the_controller_too() -> None:
    cache = WorkloadCache(complete=False)
    read_by_controller(cache, a_live())
    cache.forget("acme/a")  # InstanceStore._writing, on a write that raised
    assert cache.controller_view("acme/a") is None
    assert cache.get("acme/a") is None  # not complete: let go


def test_with_several_replicas_only_the_controllers_live_instances_are_held() -> None:
    cache = WorkloadCache(complete=False)
    cache.written(a_live("acme/b"))  # another replica's controller may write it next
    assert cache.get("acme/b") is None
    read_by_controller(cache, an_instance("acme/a", "pending", admitted=False))
    assert cache.get("acme/a") is None  # not admitted yet: the API side may still write
    read_by_controller(cache, a_live())
    assert cache.get("acme/a") == a_live()
    cache.written(a_live(state="stopped"))  # settled: rarely reconciled again
    assert (cache.get("acme/a"), cache.controller_view("acme/a")) == (None, None)
    cache.handed(a_live("acme/c", "pending"))  # inserted by this replica's API
    assert cache.controller_view("acme/c") == (a_live("acme/c", "pending"), None)
    cache.forget_all()  # leadership lost
    assert (cache.get("acme/c"), cache.controller_view("acme/c")) == (None, None)


def test_where_one_replica_runs_a_lost_leadership_keeps_the_copy_but_not_the_trust() -> None:
    cache = WorkloadCache(complete=True)
    read_by_controller(cache, a_live())
    cache.forget_all()
    assert cache.get("acme/a") == a_live()
    assert cache.controller_view("acme/a") is None


def test_a_read_that_found_nothing_lets_the_instance_go() -> None:
    cache = WorkloadCache(complete=True)
    cache.written(a_live())
    read_by_controller(cache, None)
    assert cache.get("acme/a") is None


# --- readers and observers --------------------------------------------------------------


async def test_readers_waiting_on_an_instance_are_handed_the_written_document() -> None:
    cache = WorkloadCache(complete=True)
    first, second = cache.listen("acme/a"), cache.listen("acme/a")
    assert first is second  # readers of one instance share one wait
    readers = [
        asyncio.create_task(cache.wait("acme/a", first, 5.0)),
        asyncio.create_task(cache.wait("acme/a", second, 5.0)),
    ]
    await asyncio.sleep(0)
    cache.written(a_live())
    for recorded in await asyncio.gather(*readers):
        assert recorded is not None
        # The controller has not read its stop request: the reader reads it.
        assert (recorded.doc["state"], recorded.stop_requested) == ("running", None)
    # Nobody told within the time: look again; the next reader waits afresh.
    news = cache.listen("acme/a")
    assert await cache.wait("acme/a", news, 0.01) is None
    assert cache.listen("acme/a") is not news


async def test_a_reader_learns_whether_the_controller_is_carrying_out_a_stop() -> None:
    cache = WorkloadCache(complete=False)
    read_by_controller(cache, a_live(), STOP)
    news = cache.listen("acme/a")
    cache.written(a_live(state="stopping"))
    recorded = await cache.wait("acme/a", news, 1.0)
    assert recorded is not None
    assert (recorded.doc["state"], recorded.stop_requested) == ("stopping", True)


def test_observers_see_each_write_read_and_removal() -> None:
    cache = WorkloadCache(complete=False)
    seen: list[tuple[str, str | None]] = []
    cache.observe(lambda key, doc: seen.append((key, None if doc is None else doc["state"])))
    cache.written(a_live(state="queued"))  # written, though not held here
    read_by_controller(cache, a_live())
    with cache.reading("acme/a") as keep:
        cache.forget("acme/a")
        keep(a_live(state="pending"), None)  # stale: not told
    cache.removed("acme/a")
    assert seen == [("acme/a", "queued"), ("acme/a", "running"), ("acme/a", None)]


def test_the_controller_reads_a_settled_instance_afresh_even_where_it_is_held() -> None:
    """A stopped instance's stop request outlives it until a start forgets it: the
    start's reconcile must not trust the request it read before."""
    cache = WorkloadCache(complete=True)
    read_by_controller(cache, a_live(state="stopped"), STOP)
    assert cache.get("acme/a") is not None  # held for the lists
    assert cache.controller_view("acme/a") is None
    read_by_controller(cache, a_live(), STOP)
    cache.written(a_live(state="stopped"))
    assert cache.controller_view("acme/a") is None
