"""Instance lists served from memory (list_model.py, InstanceListModel): pages as the
store would give them (one tenant, in `_id` order, filtered, after a cursor), kept by
the process's own writes; a write made during the start-up fill wins over what the
fill read; a failed write is read again before it is served."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

from gpucloud_instances.documents import InstanceDoc
from gpucloud_instances.list_model import InstanceListModel


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


async def filled(*docs: InstanceDoc) -> InstanceListModel:
    model = InstanceListModel()

    async def every_instance() -> list[InstanceDoc]:
        return list(docs)

    await model.fill(every_instance)
    return model


def page(model: InstanceListModel, tenant: str, **query: Any) -> list[str]:
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
    model.unsure("acme/a")
    model.unsure("acme/b")
    assert sorted(model.take_unsure()) == ["acme/a", "acme/b"]
    assert model.take_unsure() == []  # handed out once
    model.refreshed("acme/a", an_instance("acme/a", "failed"))
    model.refreshed("acme/b", None)  # the store has it no more
    assert page(model, "acme", states=["failed"]) == ["acme/a"]
    assert model.get("acme/b") is None


async def test_a_later_successful_write_settles_an_unsure_instance() -> None:
    model = await filled(an_instance("acme/a"))
    model.unsure("acme/a")
    model.written(an_instance("acme/a", "stopping"))
    assert model.take_unsure() == []


async def test_a_write_made_during_the_fill_wins_over_what_the_fill_read() -> None:
    model = InstanceListModel()

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
