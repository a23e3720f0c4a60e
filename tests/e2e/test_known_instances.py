"""The leader's memory of live instances (instances.known.KnownInstances), on
the stack's real database: a reconcile woken by the pod watch trusts it, and every
change from outside is seen once the controller is told of it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pymongo import AsyncMongoClient

from gpucloud_instances.instances.known import KnownInstances
from gpucloud_instances.instances.store import InstanceStore
from gpucloud_instances.store import RequestStore
from tests.e2e.support import unique

KEY = "acme/i-1"


@pytest.fixture
async def stores(
    mongo: AsyncMongoClient[dict[str, Any]],
) -> AsyncIterator[tuple[KnownInstances, InstanceStore, RequestStore]]:
    name = unique("gpucloud_known_test").replace("-", "_")
    instances, requests = InstanceStore(mongo[name]), RequestStore(mongo[name])
    # Only what the memory looks at; the store takes any document.
    live: Any = {
        "_id": KEY,
        "tenant_id": "acme",
        "state": "running",
        "sequence": 3,
        "admitted": True,
    }
    await instances.insert(live)
    yield KnownInstances(instances, requests), instances, requests
    await mongo.drop_database(name)


async def test_a_stop_request_shows_once_the_controller_is_told(
    stores: tuple[KnownInstances, InstanceStore, RequestStore],
) -> None:
    known, _, requests = stores
    doc, stop = await known.read(KEY)
    assert doc is not None
    assert (doc["sequence"], stop) == (3, None)

    await requests.request(KEY, "stop")
    assert (await known.read(KEY))[1] is None  # the pod watch's wake-up: no read
    known.forget(KEY)  # what the API's wake-up does
    doc, stop = await known.read(KEY)
    assert stop is not None


async def test_what_a_read_brings_is_not_trusted_when_a_change_was_told_meanwhile(
    stores: tuple[KnownInstances, InstanceStore, RequestStore],
) -> None:
    known, _, requests = stores
    reading = asyncio.create_task(known.read(KEY))
    await asyncio.sleep(0)
    assert not reading.done()
    known.forget(KEY)  # an outside change, told while the read was in flight
    _, stop = await reading
    assert stop is None
    await requests.request(KEY, "stop")
    _, stop = await known.read(KEY)
    assert stop is not None  # read from the store again


async def test_the_controllers_own_writes_are_kept_and_settled_ones_dropped(
    stores: tuple[KnownInstances, InstanceStore, RequestStore],
) -> None:
    known, instances, _ = stores
    doc, _ = await known.read(KEY)
    assert doc is not None
    known.wrote({**doc, "pod_ip": "10.0.0.7"})
    assert (await known.read(KEY))[0] == {**doc, "pod_ip": "10.0.0.7"}

    await instances.update_fields(KEY, {"state": "stopped"})
    known.wrote({**doc, "state": "stopped"})  # terminal: no longer kept
    doc, _ = await known.read(KEY)
    assert doc is not None
    assert doc["state"] == "stopped"
    assert doc.get("pod_ip") is None  # read from the store, which never had it

    known.forget_all()
    await instances.update_fields(KEY, {"state": "running"})
    assert (await known.read(KEY))[0]["state"] == "running"  # type: ignore[index]
