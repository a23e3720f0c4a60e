"""The pure rules of admitting an instance: its stored document, events included."""

from __future__ import annotations

from datetime import datetime

from ..documents import InstanceDoc
from ..lifecycle import State, Step
from ..transitions import transition_events
from ..workloads.admitted import NewWorkload
from .schemas import InstanceCreate


def instance_document(new: NewWorkload, body: InstanceCreate, created: datetime) -> InstanceDoc:
    """A new instance as stored: `pending` when its quota was claimed, `queued` when it
    waits for the admission queue (`body.queue`), with that first transition in its
    history and its lifecycle event in the outbox for the controller to publish."""
    first = State.QUEUED if body.queue else State.PENDING
    doc: InstanceDoc = {
        # mypy wants a ** item to name the optional keys too; those the kind
        # sets later stay absent.
        **new.document_fields("instance_id"),  # type: ignore[typeddict-item]
        "image": body.image,
        "template": body.template.model_dump(by_alias=True),
        "state": first.value,
        "reason": None,
        "message": None,
        "sequence": 0,
        "history": [],
        "outbox": [],
        "has_outbox": False,
        "admitted": True,
        "node": None,
        "zone": None,
        "from_stock": False,
        "priority": body.priority,
        "created_at": created,
        "updated_at": created,
    }
    step = Step(first, created)
    doc["outbox"] = transition_events(doc, [step])
    doc["sequence"], doc["has_outbox"] = 1, True
    doc["history"] = [{"state": step.state.value, "at": step.at, "reason": step.reason}]
    return doc
