"""Instance lists from the workload cache (workloads/cache.py) against the store's own pages, on the
stack's real database: the same pages for the same documents, and every write the
store takes shows at once."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
from pymongo import AsyncMongoClient

from gpucloud_instances.instances.store import InstanceStore
from gpucloud_instances.lifecycle import State, Step
from gpucloud_instances.store import TENANTS
from gpucloud_instances.workloads.cache import WorkloadCache
from tests.e2e.support import unique

STATES = ("queued", "pending", "running", "stopped", "failed", "deleted")


def instance(tenant: str, number: int, state: str, spec: str) -> Any:
    return {
        "_id": f"{tenant}/i-{number:03d}", "tenant_id": tenant, "instance_id": f"i-{number:03d}",
        "state": state, "spec_name": spec, "sequence": 1, "admitted": True,
        "outbox": [{"id": "e1"}], "created_at": datetime(2026, 1, 1, tzinfo=UTC),
    }  # fmt: skip


def remembering(
    mongo: AsyncMongoClient[dict[str, Any]], db_name: str
) -> tuple[WorkloadCache, InstanceStore]:
    """A store that writes every instance (one replica), and its cache."""
    store = InstanceStore(mongo[db_name], complete_cache=True)
    return store.cache, store


@pytest.fixture
async def db_name(mongo: AsyncMongoClient[dict[str, Any]]) -> AsyncIterator[str]:
    name = unique("gpucloud_lists_test").replace("-", "_")
    yield name
    await mongo.drop_database(name)


async def test_pages_from_memory_are_the_stores_pages(
    mongo: AsyncMongoClient[dict[str, Any]], db_name: str
) -> None:
    store = InstanceStore(mongo[db_name])
    docs = [
        instance(tenant, number, STATES[number % len(STATES)], f"spec-{number % 2}")
        for tenant in ("acme", "globex")
        for number in range(30)
    ]
    for doc in docs:
        await store.insert(doc)
    await mongo[db_name][TENANTS].insert_many([{"_id": "acme"}, {"_id": "globex"}])
    model, remembered = remembering(mongo, db_name)
    await remembered.fill_cache()
    assert model.ready

    queries = itertools.product(
        ("acme", "globex", "nobody"),
        (None, ["running"], ["pending", "queued"], ["deleted"]),
        (None, "spec-1"),
        (None, "acme/i-011", "globex/i-029"),
        (1, 7, 100),
    )
    for tenant, states, spec, after, limit in queries:
        expected = await store.page(tenant, states=states, spec_name=spec, after=after, limit=limit)
        got = await remembered.page(tenant, states=states, spec_name=spec, after=after, limit=limit)
        assert got == expected, (tenant, states, spec, after, limit)
    every = await remembered.page(None, states=None, spec_name=None, after=None, limit=1000)
    assert every == await store.page(None, states=None, spec_name=None, after=None, limit=1000)
    assert len(every) == 50  # 60, less the deleted
    assert all("outbox" not in doc for doc in every)


async def test_each_write_shows_in_the_next_page(
    mongo: AsyncMongoClient[dict[str, Any]], db_name: str
) -> None:
    _, store = remembering(mongo, db_name)
    await store.insert(instance("acme", 1, "pending", "spec-0"))
    await store.fill_cache()
    await store.insert(instance("acme", 2, "pending", "spec-0"))

    async def page() -> list[tuple[str, str, str | None]]:
        docs = await store.page("acme", states=None, spec_name=None, after=None, limit=10)
        return [(doc["_id"], doc["state"], doc.get("message")) for doc in docs]

    assert await page() == [("acme/i-001", "pending", None), ("acme/i-002", "pending", None)]
    doc = await store.get("acme/i-002")
    assert doc is not None
    done = await store.transition(doc, [], events=[])  # no steps: nothing written
    assert done == doc
    running = await store.transition(doc, [Step(State.RUNNING, datetime.now(UTC))], events=[])
    assert running is not None
    await store.update_fields("acme/i-001", {"message": "waiting for the namespace quota"})
    assert await page() == [
        ("acme/i-001", "pending", "waiting for the namespace quota"),
        ("acme/i-002", "running", None),
    ]
    current = await store.current("acme/i-002")
    assert current == running == await store.get("acme/i-002")
    await store.transition(running, [Step(State.DELETED, datetime.now(UTC))], events=[])
    await store.remove("acme/i-001")
    assert await page() == []
    # A deleted instance is still read (from the store) where the API asks for it.
    deleted = await store.current("acme/i-002")
    assert deleted is not None
    assert deleted["state"] == "deleted"


async def test_a_write_during_the_fill_wins_over_what_the_fill_read(
    mongo: AsyncMongoClient[dict[str, Any]], db_name: str
) -> None:
    model, store = remembering(mongo, db_name)
    await store.insert(instance("acme", 1, "pending", "spec-0"))
    read_at_fill = asyncio.Event()

    async def slow_read() -> list[Any]:
        docs = [doc async for doc in mongo[db_name]["instances"].find({})]
        read_at_fill.set()
        await asyncio.sleep(0.2)  # the write below lands meanwhile
        return docs

    filling = asyncio.create_task(model.fill(slow_read))
    await read_at_fill.wait()
    await store.update_fields("acme/i-001", {"message": "changed during the fill"})
    await filling
    [doc] = await store.page("acme", states=None, spec_name=None, after=None, limit=10)
    assert doc.get("message") == "changed during the fill"
