"""Metering records every GPU-holding transition in one shape, whatever its kind."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest

from gpucloud_instances.transitions import GpusHeld
from gpucloud_libs.events import (
    CloudEvent,
    GpuHoldingTransition,
    InstanceStateChanged,
    JobRunStateChanged,
    ReplicaStateChanged,
)
from gpucloud_libs.naming import ID_PATTERN
from gpucloud_metering.facts import FactRecorder

AT = datetime(2026, 11, 27, 4, 30, 0, 123456, tzinfo=UTC)
HELD: dict[str, Any] = {
    "tenant_id": "t-1", "user_id": "u-1", "spec_name": "h100x2", "gpu_type": "NVIDIA-H100",
    "gpu_count": 2, "zone": "zone-a", "node": "node-7", "cluster": "local-2",
    "region": "london", "sequence": 3, "at": AT,
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
    assert (doc["cluster"], doc["region"]) == ("local-2", "london")
    assert doc["at_us"] == 1795753800123456  # to the microsecond, as it was sent


def test_no_instance_id_can_be_another_kinds_workload_id() -> None:
    """Runs are billed as `<job>/<run>`, replicas as `svc--<service>/<replica>`: an
    instance id holds neither `/` nor `--`, so none can be billed as either."""
    assert len({event.workload_id for event, *_ in KINDS}) == 3
    for taken in ("job-1/x7k2p", "svc--chat", "a--b"):
        assert re.fullmatch(ID_PATTERN, taken) is None
    assert re.fullmatch(ID_PATTERN, "i-1") is not None


@pytest.mark.parametrize(("event", "workload", "job", "service"), KINDS)
def test_each_kind_comes_off_kafka_as_itself(
    event: GpuHoldingTransition, workload: str, job: str | None, service: str | None
) -> None:
    """What the instances service publishes is what metering decodes: the right kind,
    through the event union, with its workload and owner."""
    _, value, headers = CloudEvent.new(event, source="/gpucloud/instances").to_kafka()
    decoded = CloudEvent.from_kafka(value, headers).data
    assert decoded == event
    assert type(decoded) is type(event)
    assert isinstance(decoded, GpuHoldingTransition)
    assert (decoded.workload_id, decoded.of_job, decoded.of_service) == (workload, job, service)


def test_the_instances_services_held_gpus_are_the_base_events_fields() -> None:
    """The instances service fills the shared fields from one TypedDict: each of them
    is a field of the base the three kinds extend."""
    assert set(GpusHeld.__annotations__) <= set(GpuHoldingTransition.model_fields)
