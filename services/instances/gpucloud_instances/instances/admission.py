"""The pure rules of admitting an instance: its stored document, events included."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from gpucloud_libs.identity import Identity
from gpucloud_libs.mongo import Document

from ..admission import spec_fields
from ..documents import InstanceDoc, SpecDoc, TenantDoc
from ..lifecycle import State, Step
from ..transitions import transition_events
from .schemas import InstanceCreate


@dataclass(frozen=True)
class NewInstance:
    """A start the API admitted: who asked, for what spec and image, how a replay is
    recognised (its instanceID, Idempotency-Key and request hash), where it may run,
    and the storages it gets."""

    key: str
    identity: Identity
    tenant: TenantDoc
    spec: SpecDoc
    body: InstanceCreate
    instance_id: str
    idempotency_key: str | None
    request_hash: str
    zones: list[str]
    storages: list[Document]


def instance_document(new: NewInstance, created: datetime) -> InstanceDoc:
    """A new instance as stored: `pending` when its quota was claimed, `queued` when it
    waits for the admission queue (`body.queue`), with that first transition in its
    history and its lifecycle event in the outbox for the controller to publish."""
    body, spec, tenant = new.body, new.spec, new.tenant
    first = State.QUEUED if body.queue else State.PENDING
    doc: InstanceDoc = {
        "_id": new.key,
        "tenant_id": tenant["_id"],
        "instance_id": new.instance_id,
        "user_id": new.identity.subject,
        "idempotency_key": new.idempotency_key,
        "request_hash": new.request_hash,
        # mypy wants a ** item to name the optional keys too; those the kind
        # sets later stay absent.
        **spec_fields(spec, new.zones),  # type: ignore[typeddict-item]
        "image": body.image,
        "template": body.template.model_dump(by_alias=True),
        "storages": new.storages,
        "namespace": tenant["namespace"],
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
