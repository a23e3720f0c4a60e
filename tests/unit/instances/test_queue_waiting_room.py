"""What the admission queue knows of each workload (queue/admissions.py): a queued job or
instance as the pass weighs it (its pool, its GPUs of quota, its units, whether it
may borrow), the waiting room kept as workloads are read and written, and a tenant's published
line read back (queue/line.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, cast

from gpucloud_instances.documents import InstanceDoc, JobDoc
from gpucloud_instances.queue.admissions import (
    Starting,
    WaitingRoom,
    queued_instance,
    queued_job,
)
from gpucloud_instances.queue.decision import Queued
from gpucloud_instances.queue.documents import QueueLineDoc
from gpucloud_instances.queue.line import Line, place_new
from gpucloud_instances.wakeups import instance_item, job_item

#: As the store hands a datetime back: naive, in UTC.
STORED_AT = datetime(2026, 11, 2, 8, 0)
AT = STORED_AT.replace(tzinfo=UTC)
H100 = "NVIDIA-H100"
#: The home cluster, where a workload recorded before clusters were runs.
HOME = "local-1"
#: H100s of the home cluster: a pool is a GPU kind in one cluster.
HOME_H100 = f"{HOME}/{H100}"


def a_job(state: str = "queued", **fields: Any) -> JobDoc:
    doc = {
        "_id": "acme/train", "tenant_id": "acme", "gpu_type": H100, "gpu_count": 2,
        "parallelism": 3, "priority": 5, "state": state, "created_at": STORED_AT, **fields,
    }  # fmt: skip
    return cast(JobDoc, doc)


def an_instance(state: str = "queued", **fields: Any) -> InstanceDoc:
    doc = {
        "_id": "acme/nb", "tenant_id": "acme", "gpu_type": H100, "gpu_count": 1,
        "state": state, "created_at": STORED_AT, **fields,
    }  # fmt: skip
    return cast(InstanceDoc, doc)


def test_a_queued_job_asks_for_all_its_pods_gpus_and_may_borrow() -> None:
    assert queued_job(a_job(), HOME) == Queued(
        "job:acme/train", "acme", HOME_H100, gpus=6, priority=5, created_at=AT, may_borrow=True,
        units=6, spread=0,
    )  # fmt: skip


def test_a_queued_multi_node_job_must_spread_over_its_nodes() -> None:
    queued = queued_job(a_job(parallelism=4, nodes=4, gpu_count=8), HOME)
    assert (queued.gpus, queued.units, queued.spread) == (32, 32, 4)


def test_a_queued_job_of_slices_takes_slices_from_their_pool_and_whole_gpus_of_quota() -> None:
    sliced = a_job(
        gpu_count=3, parallelism=4, gpu_resource="nvidia.com/mig-1g.10gb", gpu_weight="1/7"
    )
    queued = queued_job(sliced, HOME)
    assert queued.gpu_type == f"{HOME_H100} mig-1g.10gb"
    assert (queued.units, queued.gpus) == (12, 2)  # 12/7 of a GPU, rounded up


def test_a_queued_instance_never_borrows_and_defaults_to_priority_zero() -> None:
    queued = queued_instance(an_instance(), HOME)
    assert queued == Queued("acme/nb", "acme", HOME_H100, 1, 0, AT, units=1)
    assert not queued.may_borrow
    assert queued_instance(an_instance(priority=-3), HOME).priority == -3


def test_a_workload_takes_its_gpus_from_the_pool_of_the_cluster_it_was_placed_in() -> None:
    assert queued_instance(an_instance(cluster="local-2"), HOME).gpu_type == f"local-2/{H100}"
    assert queued_job(a_job(cluster="local-2"), HOME).gpu_type == f"local-2/{H100}"
    room = WaitingRoom(HOME)
    room.job(a_job("admitted", cluster="local-2"))
    starting = room.starting["job:acme/train"]
    assert (starting.cluster, starting.pool) == ("local-2", f"local-2/{H100}")


def test_the_room_holds_a_queued_job_with_the_reason_its_document_records() -> None:
    room = WaitingRoom(HOME)
    room.job(a_job(queue_reason="quota"))
    assert list(room.queued) == ["job:acme/train"]
    assert room.queued["job:acme/train"].gpus == 6
    assert room.recorded == {"job:acme/train": "quota"}
    assert room.starting == {}


def test_an_admitted_job_leaves_the_room_and_its_gpus_are_spoken_for_until_it_runs() -> None:
    room = WaitingRoom(HOME)
    room.job(a_job())
    room.job(a_job("admitted"))
    assert (room.queued, room.recorded) == ({}, {})
    assert room.starting == {
        "job:acme/train": Starting("acme/train", "acme", HOME, HOME_H100, 3, 2)
    }
    room.job(a_job("running"))
    assert room.starting == {}


def test_an_admitted_job_of_shared_gpus_is_spoken_for_in_its_pool() -> None:
    room = WaitingRoom(HOME)
    room.job(a_job("admitted", gpu_resource="nvidia.com/gpu.shared", gpu_weight="1/4"))
    assert room.starting["job:acme/train"].pool == f"{HOME_H100} gpu.shared"


def test_an_instance_waits_under_its_own_key_and_leaves_once_pending() -> None:
    room = WaitingRoom(HOME, open=True)
    room.instance_written("acme/nb", an_instance(queue_reason=None, admitted=True))
    assert room.recorded == {"acme/nb": None}
    # The worker's write of its reason reaches the room through the cache.
    room.instance_written("acme/nb", an_instance(queue_reason="capacity", admitted=True))
    assert room.recorded == {"acme/nb": "capacity"}
    room.instance_written("acme/nb", an_instance("pending", admitted=True))
    assert (room.queued, room.recorded) == ({}, {})


def test_an_instance_not_admitted_or_gone_leaves_the_room() -> None:
    room = WaitingRoom(HOME, open=True)
    room.instance_written("acme/nb", an_instance(admitted=True))
    room.instance_written("acme/nb", an_instance(admitted=False))
    assert room.queued == {}
    room.instance_written("acme/nb", an_instance(admitted=True))
    room.instance_written("acme/nb", None)
    assert (room.queued, room.recorded) == ({}, {})


def test_the_room_notes_no_write_until_it_is_filled_for_a_leadership() -> None:
    room = WaitingRoom(HOME)
    room.instance_written("acme/nb", an_instance(admitted=True))
    assert room.queued == {}
    room.open = True
    room.instance_written("acme/nb", an_instance(admitted=True))
    room.clear()  # leadership lost
    room.instance_written("acme/other", an_instance(admitted=True))
    assert (room.open, room.queued) == (False, {})


def test_a_workload_whose_document_is_gone_is_forgotten_entirely() -> None:
    room = WaitingRoom(HOME)
    room.job(a_job("admitted"))
    room.instance(an_instance())
    room.forget(job_item("acme/train"))
    room.forget(instance_item("acme/nb"))
    assert (room.queued, room.recorded, room.starting) == ({}, {}, {})


def test_a_new_leader_starts_from_an_empty_room() -> None:
    room = WaitingRoom(HOME)
    room.job(a_job())
    room.job(a_job("admitted", _id="acme/other"))
    room.clear()
    assert (room.queued, room.recorded, room.starting) == ({}, {}, {})


def test_a_tenant_with_no_published_line_puts_everything_first_until_the_pass() -> None:
    place = Line.of(None).position("job:acme/train", 0, None)
    assert (place.position, place.gpus_ahead, place.reason) == (1, 0, "admission")


def test_a_published_line_is_read_back_with_the_reason_each_one_waits_for() -> None:
    doc = QueueLineDoc(_id="acme", items=["acme/nb", "job:acme/t"], gpus=[1, 4], priorities=[5, 0])
    line = Line.of(doc)
    place = line.position("job:acme/t", 0, "capacity")
    assert (place.position, place.gpus_ahead, place.reason) == (2, 1, "capacity")
    # Reading places leaves the line equal to the one published: no republish.
    assert line == Line(["acme/nb", "job:acme/t"], [1, 4], [5, 0])


def test_a_new_workload_of_low_priority_stands_behind_every_band_above_it() -> None:
    bands = [[5, 2, 3], [0, 4, 8], [-2, 1, 1]]
    low = place_new(bands, -1, None)
    assert (low.position, low.gpus_ahead, low.reason) == (7, 11, "admission")
    assert place_new(bands, -2, "quota").position == 8
    assert place_new([], 0, None).position == 1
