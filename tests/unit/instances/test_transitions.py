"""The lifecycle events the instances service publishes (transitions.py): what a job's,
a run's, a replica's and an instance's event says, how it is numbered and keyed, and
what metering reads from it to bill (whose GPUs, how many, of which kind, where)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from gpucloud_instances.documents import InstanceDoc, JobDoc, JobRunDoc, ReplicaRunDoc, ServiceDoc
from gpucloud_instances.job_lifecycle import JobState, RunState
from gpucloud_instances.lifecycle import State, Step
from gpucloud_instances.transitions import (
    EVENT_SOURCE,
    INFERENCE_EVENT_SOURCE,
    JOB_EVENT_SOURCE,
    job_event,
    lifecycle_event,
    replica_event,
    run_event,
    transition_events,
)
from gpucloud_libs.events import CloudEvent, JobRunStateChanged, ReplicaStateChanged
from gpucloud_libs.outbox import OutboxEntry

AT = datetime(2026, 11, 3, 9, 30, 0, 125000, tzinfo=UTC)
MIG = {"gpu_resource": "nvidia.com/mig-1g.10gb", "gpu_weight": "1/7"}


def payload(entry: OutboxEntry) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(entry["value"])
    return data


def decoded(entry: OutboxEntry) -> CloudEvent:
    return CloudEvent.from_kafka(entry["value"].encode(), entry["headers"])


def a_job(**fields: Any) -> JobDoc:
    """Tenant acme's job `train` on two H100s a pod, `queued` and never numbered yet."""
    doc: dict[str, Any] = {
        "_id": "acme/train", "tenant_id": "acme", "job_id": "train", "user_id": "u-7",
        "spec_name": "h100x2", "gpu_type": "NVIDIA-H100", "gpu_count": 2, "state": "queued",
        "sequence": 0,
    }  # fmt: skip
    return cast(JobDoc, {**doc, **fields})


def a_run(**fields: Any) -> JobRunDoc:
    run: JobRunDoc = {
        "state": "scheduled", "sequence": 1, "node": "h100-a-3", "zone": "zone-a",
        "scheduled_at": AT, "started_at": None, "ended_at": None, "exit_code": None,
    }  # fmt: skip
    return {**run, **fields}  # type: ignore[typeddict-item]


def a_service(**fields: Any) -> ServiceDoc:
    doc: dict[str, Any] = {
        "_id": "acme/chat", "tenant_id": "acme", "service_id": "chat", "user_id": None,
        "spec_name": "l40s", "gpu_type": "NVIDIA-L40S", "gpu_count": 1,
    }  # fmt: skip
    return cast(ServiceDoc, {**doc, **fields})


def an_instance(**fields: Any) -> InstanceDoc:
    doc: dict[str, Any] = {
        "_id": "acme/nb", "tenant_id": "acme", "instance_id": "nb", "user_id": "u-1",
        "spec_name": "a100-slice", "gpu_type": "NVIDIA-A100", "gpu_count": 2, "state": "pending",
        "sequence": 1, "node": "a100-b-0", "zone": "zone-b",
    }  # fmt: skip
    return cast(InstanceDoc, {**doc, **fields})


def test_a_jobs_first_event_is_numbered_one_and_follows_no_state() -> None:
    entry = job_event(a_job(), JobState.QUEUED, AT)
    assert entry["id"] == "acme/train#1"
    assert entry["key"] == "acme/train"
    assert entry["headers"]["ce_source"] == JOB_EVENT_SOURCE == "/gpucloud/jobs"
    assert entry["headers"]["ce_type"] == "io.gpucloud.job.state_changed.v1"
    data = payload(entry)
    assert (data["state"], data["previous_state"], data["sequence"]) == ("queued", None, 1)
    assert (data["job_id"], data["tenant_id"], data["user_id"]) == ("train", "acme", "u-7")
    assert data["spec_name"] == "h100x2"


def test_a_later_job_event_follows_the_recorded_state_with_its_reason_and_exit_code() -> None:
    running = a_job(state="running", sequence=3)
    entry = job_event(running, JobState.FAILED, AT, reason="retries_exhausted", exit_code=137)
    assert entry["id"] == "acme/train#4"
    data = payload(entry)
    assert (data["previous_state"], data["state"], data["sequence"]) == ("running", "failed", 4)
    assert (data["reason"], data["exit_code"]) == ("retries_exhausted", 137)
    assert datetime.fromisoformat(data["at"]) == AT


def test_a_runs_event_is_numbered_per_run_but_keyed_by_its_job() -> None:
    """A run's events share their job's partition, so a job's runs stay in order with
    each other; the id names the run, so two runs' events never collide."""
    entry = run_event(a_job(), "x7k2p", a_run(sequence=1), RunState.RUNNING, AT)
    assert entry["id"] == "acme/train/x7k2p#2"
    assert entry["key"] == "acme/train"
    event = decoded(entry)
    assert event.source == JOB_EVENT_SOURCE
    assert isinstance(event.data, JobRunStateChanged)
    assert (event.data.run_id, event.data.state, event.data.sequence) == ("x7k2p", "running", 2)
    assert event.data.workload_id == "train/x7k2p"


def test_a_runs_event_holds_its_jobs_gpus_at_the_runs_own_placement() -> None:
    entry = run_event(a_job(), "r1", a_run(node="h100-c-9", zone="zone-c"), RunState.SCHEDULED, AT)
    data = payload(entry)
    assert (data["gpu_type"], data["gpu_count"], data["spec_name"]) == ("NVIDIA-H100", 2, "h100x2")
    assert (data["gpu_resource"], data["gpu_weight"]) == ("nvidia.com/gpu", "1")
    assert (data["node"], data["zone"]) == ("h100-c-9", "zone-c")
    assert (data["tenant_id"], data["user_id"]) == ("acme", "u-7")


def test_an_ended_runs_event_carries_the_exit_code_recorded_with_it() -> None:
    ended = a_run(state="running", sequence=2, exit_code=3, ended_at=AT)
    data = payload(run_event(a_job(), "r1", ended, RunState.FAILED, AT))
    assert (data["state"], data["exit_code"], data["sequence"]) == ("failed", 3, 3)


def test_a_run_of_sliced_gpus_is_billed_at_the_slices_weight() -> None:
    data = payload(run_event(a_job(**MIG), "r1", a_run(), RunState.SCHEDULED, AT))
    assert (data["gpu_resource"], data["gpu_weight"]) == ("nvidia.com/mig-1g.10gb", "1/7")


def test_a_replicas_event_names_its_service_revision_and_placement() -> None:
    run: ReplicaRunDoc = {
        "state": "scheduled", "sequence": 1, "revision": 3, "node": "l40s-a-1", "zone": "zone-a",
        "scheduled_at": AT, "ended_at": None,
    }  # fmt: skip
    entry = replica_event(a_service(), "7f9c4-bx2lq", run, "running", AT + timedelta(seconds=4))
    assert entry["id"] == "acme/chat/7f9c4-bx2lq#2"
    assert entry["key"] == "acme/chat"
    event = decoded(entry)
    assert event.source == INFERENCE_EVENT_SOURCE == "/gpucloud/inference-services"
    assert isinstance(event.data, ReplicaStateChanged)
    assert (event.data.service_id, event.data.replica_id) == ("chat", "7f9c4-bx2lq")
    assert (event.data.revision, event.data.state, event.data.sequence) == (3, "running", 2)
    assert (event.data.node, event.data.zone, event.data.gpu_count) == ("l40s-a-1", "zone-a", 1)
    assert event.data.user_id is None
    assert event.data.at == AT + timedelta(seconds=4)


def test_an_instances_event_carries_its_placement_and_its_shared_gpu_kind() -> None:
    shared = an_instance(
        gpu_resource="nvidia.com/gpu.shared", gpu_weight="1/4", cluster="local-2", region="london"
    )
    entry = lifecycle_event(shared, Step(State.SCHEDULED, AT), 2, State.PENDING)
    assert entry["id"] == "acme/nb#2"
    assert entry["headers"]["ce_source"] == EVENT_SOURCE == "/gpucloud/instances"
    assert entry["headers"]["ce_subject"] == "acme/nb"
    data = payload(entry)
    assert (data["state"], data["previous_state"], data["sequence"]) == ("scheduled", "pending", 2)
    assert (data["gpu_resource"], data["gpu_weight"]) == ("nvidia.com/gpu.shared", "1/4")
    assert (data["node"], data["zone"], data["gpu_count"]) == ("a100-b-0", "zone-b", 2)
    assert (data["cluster"], data["region"]) == ("local-2", "london")  # revenue by region


def test_an_instances_first_transition_follows_no_state_and_keeps_its_steps_reason() -> None:
    fresh = an_instance(state="queued", sequence=0)
    [first] = transition_events(fresh, [Step(State.QUEUED, AT)])
    assert (payload(first)["previous_state"], payload(first)["sequence"]) == (None, 1)
    failed = an_instance(state="pending", sequence=1)
    [entry] = transition_events(failed, [Step(State.FAILED, AT, "unschedulable")])
    data = payload(entry)
    assert (data["previous_state"], data["reason"]) == ("pending", "unschedulable")


def test_an_instances_event_time_is_its_steps_to_the_millisecond() -> None:
    """The history keeps milliseconds: the event's instant is the same one, so the bill
    and the API read the same time."""
    precise = AT + timedelta(microseconds=456)
    [entry] = transition_events(an_instance(), [Step(State.SCHEDULED, precise)])
    assert datetime.fromisoformat(payload(entry)["at"]) == AT


def test_no_steps_make_no_events() -> None:
    assert transition_events(an_instance(), []) == []
