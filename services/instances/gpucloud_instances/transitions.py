"""The lifecycle events of instances', jobs' and replicas' transitions, as outbox entries.

They are built where the transition is recorded (the API's admission, the
controller's observations) and written in the same single-document update,
so an event exists exactly when its transition does. Event ids are
deterministic (`<tenant>/<instance>#<sequence>`), so a republish after a crash
is deduplicated downstream.
"""

from __future__ import annotations

from datetime import datetime
from typing import TypedDict

from gpucloud_libs.events import (
    CloudEvent,
    InstanceStateChanged,
    JobRunStateChanged,
    JobStateChanged,
    ReplicaState,
    ReplicaStateChanged,
)
from gpucloud_libs.gpu_shares import GpuShare
from gpucloud_libs.outbox import OutboxEntry, outbox_entry

from .documents import InstanceDoc, JobDoc, JobRunDoc, ReplicaRunDoc, ServiceDoc, workload_project
from .job_lifecycle import JobState, RunState
from .lifecycle import State, Step

EVENT_SOURCE = "/gpucloud/instances"


class GpusHeld(TypedDict):
    """The fields every GPU-holding event carries (libs `GpuHoldingTransition`)."""

    tenant_id: str
    user_id: str | None
    project: str
    spec_name: str
    gpu_type: str
    gpu_count: int
    gpu_resource: str
    gpu_weight: str
    zone: str | None
    node: str | None
    cluster: str | None
    region: str | None


def _gpus_held(
    doc: InstanceDoc | JobDoc | ServiceDoc, *, zone: str | None, node: str | None
) -> GpusHeld:
    """Whose the GPUs are, of what spec, how many of which kind, and where: an
    instance's from its document, a run's or a replica's from its own placement."""
    share = GpuShare.of(doc)
    return GpusHeld(
        tenant_id=doc["tenant_id"], user_id=doc.get("user_id"), project=workload_project(doc),
        spec_name=doc["spec_name"],
        gpu_type=doc["gpu_type"], gpu_count=doc["gpu_count"], gpu_resource=share.resource,
        gpu_weight=str(share.weight), zone=zone, node=node, cluster=doc.get("cluster"),
        region=doc.get("region"),
    )  # fmt: skip


def lifecycle_event(
    doc: InstanceDoc, step: Step, sequence: int, previous: State | None
) -> OutboxEntry:
    """The outbox entry for one transition of the instance `doc`."""
    data = InstanceStateChanged(
        instance_id=doc["instance_id"],
        **_gpus_held(doc, zone=doc.get("zone"), node=doc.get("node")),
        state=step.state.value,
        previous_state=previous.value if previous else None,
        reason=step.reason,
        sequence=sequence,
        at=step.at,
    )
    return outbox_entry(
        CloudEvent.new(data, source=EVENT_SOURCE, event_id=f"{doc['_id']}#{sequence}")
    )


def transition_events(doc: InstanceDoc, steps: list[Step]) -> list[OutboxEntry]:
    """One entry per step, numbered on from the document's sequence."""
    events: list[OutboxEntry] = []
    previous = State(doc["state"]) if doc.get("sequence") else None
    sequence = doc["sequence"]
    for step in steps:
        sequence += 1
        events.append(lifecycle_event(doc, step, sequence, previous))
        previous = step.state
    return events


JOB_EVENT_SOURCE = "/gpucloud/jobs"


def job_event(
    doc: JobDoc,
    state: JobState,
    at: datetime,
    *,
    reason: str | None = None,
    exit_code: int | None = None,
) -> OutboxEntry:
    """The outbox entry of the job's next transition (numbered after `doc`'s last)."""
    sequence = doc["sequence"] + 1
    data = JobStateChanged(
        job_id=doc["job_id"],
        tenant_id=doc["tenant_id"],
        user_id=doc.get("user_id"),
        spec_name=doc["spec_name"],
        state=state.value,
        previous_state=doc["state"] if doc["sequence"] else None,
        reason=reason,
        exit_code=exit_code,
        sequence=sequence,
        at=at,
    )
    return outbox_entry(
        CloudEvent.new(data, source=JOB_EVENT_SOURCE, event_id=f"{doc['_id']}#{sequence}")
    )


def run_event(
    doc: JobDoc, run_id: str, run: JobRunDoc, state: RunState, at: datetime
) -> OutboxEntry:
    """The outbox entry of a run's next transition; `run` is the run before it."""
    sequence = run["sequence"] + 1
    data = JobRunStateChanged(
        job_id=doc["job_id"],
        run_id=run_id,
        **_gpus_held(doc, zone=run.get("zone"), node=run.get("node")),
        state=state.value,
        exit_code=run.get("exit_code"),
        sequence=sequence,
        at=at,
    )
    event_id = f"{doc['_id']}/{run_id}#{sequence}"
    return outbox_entry(CloudEvent.new(data, source=JOB_EVENT_SOURCE, event_id=event_id))


INFERENCE_EVENT_SOURCE = "/gpucloud/inference-services"


def replica_event(
    doc: ServiceDoc, replica_id: str, run: ReplicaRunDoc, state: ReplicaState, at: datetime
) -> OutboxEntry:
    """The outbox entry of a replica's next transition; `run` is the replica before it."""
    sequence = run["sequence"] + 1
    data = ReplicaStateChanged(
        service_id=doc["service_id"],
        replica_id=replica_id,
        **_gpus_held(doc, zone=run.get("zone"), node=run.get("node")),
        revision=run["revision"],
        state=state,
        sequence=sequence,
        at=at,
    )
    event_id = f"{doc['_id']}/{replica_id}#{sequence}"
    return outbox_entry(CloudEvent.new(data, source=INFERENCE_EVENT_SOURCE, event_id=event_id))
