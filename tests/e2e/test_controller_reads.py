"""The controller's reads of an instance through the workload cache
(`InstanceStore.for_controller`), on the stack's real database: a reconcile woken by
the pod watch trusts what it read or wrote, and every change from outside is seen
once the controller is told of it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pymongo import AsyncMongoClient

from gpucloud_instances.instances.store import InstanceStore
from gpucloud_instances.store import RequestStore
from tests.e2e.support import unique

KEY = "acme/i-1"


@pytest.fixture(params=[False, True], ids=["several-replicas", "one-replica"])
async def stores(
    request: pytest.FixtureRequest, mongo: AsyncMongoClient[dict[str, Any]]
) -> AsyncIterator[tuple[InstanceStore, RequestStore]]:
    name = unique("gpucloud_known_test").replace("-", "_")
    instances = InstanceStore(mongo[name], complete_cache=request.param)
    requests = RequestStore(mongo[name])
    # Only what the cache looks at; the store takes any document.
    live: Any = {
        "_id": KEY, "tenant_id": "acme", "state": "running", "sequence": 3, "admitted": True,
    }  # fmt: skip
    await mongo[name]["instances"].insert_one(live)  # another replica's insert
    await instances.fill_cache()
    yield instances, requests
    await mongo.drop_database(name)


async def test_a_stop_request_shows_once_the_controller_is_told(
    stores: tuple[InstanceStore, RequestStore],
) -> None:
    instances, requests = stores
    doc, stop = await instances.for_controller(KEY, requests.stop_request)
    assert doc is not None
    assert (doc["sequence"], stop) == (3, None)

    await requests.request(KEY, "stop")
    # The pod watch's wake-up: no read.
    assert (await instances.for_controller(KEY, requests.stop_request))[1] is None
    instances.cache.forget(KEY)  # what the API's wake-up does
    _, stop = await instances.for_controller(KEY, requests.stop_request)
    assert stop is not None


async def test_what_a_read_brings_is_not_trusted_when_a_change_was_told_meanwhile(
    stores: tuple[InstanceStore, RequestStore],
) -> None:
    instances, requests = stores
    reading = asyncio.create_task(instances.for_controller(KEY, requests.stop_request))
    await asyncio.sleep(0)
    assert not reading.done()
    instances.cache.forget(KEY)  # an outside change, told while the read was in flight
    _, stop = await reading
    assert stop is None
    await requests.request(KEY, "stop")
    _, stop = await instances.for_controller(KEY, requests.stop_request)
    assert stop is not None  # read from the store again


async def test_the_controllers_own_writes_are_kept(
    stores: tuple[InstanceStore, RequestStore],
) -> None:
    instances, requests = stores
    doc, _ = await instances.for_controller(KEY, requests.stop_request)
    assert doc is not None
    await instances.update_fields(KEY, {"pod_ip": "10.0.0.7"})
    kept, _ = await instances.for_controller(KEY, requests.stop_request)
    assert kept is not None
    assert kept["pod_ip"] == "10.0.0.7"
    assert kept == await instances.get(KEY)  # as the store holds it

    await instances.update_fields(KEY, {"state": "stopped"})
    doc, _ = await instances.for_controller(KEY, requests.stop_request)
    assert doc is not None
    assert doc == await instances.get(KEY)

    instances.cache.forget_all()  # leadership changed hands
    await requests.request(KEY, "stop")
    _, stop = await instances.for_controller(KEY, requests.stop_request)
    assert stop is not None  # the new leader's word is the store's
