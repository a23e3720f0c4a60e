"""The lifecycle events of an instance's transitions, as outbox entries.

They are built where the transition is recorded (the API's admission, the
controller's observations) and written in the same single-document update,
so an event exists exactly when its transition does. Event ids are
deterministic (`<tenant>/<instance>#<sequence>`), so a republish after a crash
is deduplicated downstream.
"""

from __future__ import annotations

from gpucloud_libs.events import CloudEvent, InstanceStateChanged
from gpucloud_libs.outbox import OutboxEntry, outbox_entry

from .documents import InstanceDoc
from .lifecycle import State, Step

EVENT_SOURCE = "/gpucloud/instances"


def lifecycle_event(
    doc: InstanceDoc, step: Step, sequence: int, previous: State | None
) -> OutboxEntry:
    """The outbox entry for one transition of the instance `doc`."""
    data = InstanceStateChanged(
        instance_id=doc["instance_id"],
        tenant_id=doc["tenant_id"],
        user_id=doc.get("user_id"),
        spec_name=doc["spec_name"],
        gpu_type=doc["gpu_type"],
        gpu_count=doc["gpu_count"],
        zone=doc.get("zone"),
        node=doc.get("node"),
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
