"""Metering records every GPU-holding transition in one shape, whatever its kind."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from gpucloud_libs.events import (
    GpuHoldingTransition,
    InstanceStateChanged,
    JobRunStateChanged,
    ReplicaStateChanged,
)
from gpucloud_metering.facts import FactRecorder

AT = datetime(2026, 11, 27, 4, 30, 0, 123456, tzinfo=UTC)
HELD: dict[str, Any] = {
    "tenant_id": "t-1", "user_id": "u-1", "spec_name": "h100x2", "gpu_type": "NVIDIA-H100",
    "gpu_count": 2, "zone": "zone-a", "node": "node-7", "sequence": 3, "at": AT,
}  # fmt: skip

KINDS: list[tuple[GpuHoldingTransition, str, str | None, str | None]] = [
    (InstanceStateChanged(instance_id="i-1", state="running", **HELD), "i-1", None, None),
    (
        JobRunStateChanged(job_id="job-1", run_id="x7k2p", state="running", **HELD),
        "job-1/x7k2p", "job-1", None,
    ),
    (
        ReplicaStateChanged(
            service_id="chat", replica_id="abc12", revision=2, state="running", **HELD
        ),
        "svc--chat/abc12", None, "chat",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("event", "workload", "job", "service"), KINDS)
def test_each_kind_is_recorded_under_its_workload_id_with_its_owner(
    event: GpuHoldingTransition, workload: str, job: str | None, service: str | None
) -> None:
    doc = FactRecorder.transition_document("ev-1", event)
    assert (doc["_id"], doc["instance_id"]) == (f"t-1/{workload}#3", workload)
    assert (doc["job_id"], doc["service_id"]) == (job, service)
    assert (doc["gpu_count"], doc["gpu_weight"], doc["gpu_resource"]) == (2, "1", "nvidia.com/gpu")
    assert (doc["zone"], doc["node"], doc["user_id"]) == ("zone-a", "node-7", "u-1")
    assert doc["at_us"] == 1795753800123456  # to the microsecond, as it was sent


def test_workload_ids_of_different_kinds_never_meet() -> None:
    """An instance id holds neither `/` nor `--`, so no instance can be billed as
    another kind's workload."""
    ids = {event.workload_id for event, *_ in KINDS}
    assert len(ids) == 3
    instance, run, replica = (event.workload_id for event, *_ in KINDS)
    assert "/" not in instance
    assert "--" not in instance
    assert run.count("/") == 1
    assert replica.startswith("svc--")


def test_the_shape_survives_the_wire() -> None:
    """What the instances service sends is what metering reads back, kind included."""
    for event, workload, *_ in KINDS:
        again = type(event).model_validate_json(event.model_dump_json())
        assert again == event
        assert again.workload_id == workload
