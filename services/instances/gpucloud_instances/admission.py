"""The pure rules of admitting an instance: quota, spec, zones, the stored document, replays."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime

from gpucloud_libs.errors import QuotaExceeded, ValidationFailed
from gpucloud_libs.identity import Identity
from gpucloud_libs.mongo import Document
from gpucloud_libs.naming import GPU_RESOURCE

from .documents import InstanceDoc, QuotaDoc, SpecDoc, TenantDoc
from .lifecycle import State, Step
from .schemas import InstanceCreate
from .transitions import transition_events


def request_hash(body: InstanceCreate) -> str:
    """What a replay (same instanceID or Idempotency-Key) must match."""
    canonical = json.dumps(body.model_dump(mode="json", exclude={"instance_id"}), sort_keys=True)
    return hashlib.sha256(canonical.encode()).hexdigest()


def quota_refusal(quota: QuotaDoc, count: int, gpus: int, *, wanted: int) -> QuotaExceeded | None:
    """Why one more instance with `wanted` GPUs does not fit, given `count` instances
    and `gpus` held; None when it fits. The one rule every quota check applies."""
    if count + 1 > quota["max_instances"]:
        return QuotaExceeded(
            f"the tenant may run {quota['max_instances']} instances and has {count}",
            limit="max_instances",
            limit_value=quota["max_instances"],
            in_use=count,
            requested=1,
        )
    if gpus + wanted > quota["max_gpus"]:
        return QuotaExceeded(
            f"the tenant may hold {quota['max_gpus']} GPUs, holds {gpus} and asked for {wanted}",
            limit="max_gpus",
            limit_value=quota["max_gpus"],
            in_use=gpus,
            requested=wanted,
        )
    return None


def known_spec(name: str, spec: SpecDoc | None) -> SpecDoc:
    """The spec a request names; a 422 on its field when there is none."""
    if spec is None:
        raise ValidationFailed(
            f"unknown spec {name!r}",
            errors=[{"loc": ["body", "specName"], "msg": "unknown spec", "type": "unknown_spec"}],
        )
    return spec


def allowed_zones(spec: SpecDoc, asked: str | None) -> list[str]:
    """The zones the instance may land in: the spec's, narrowed to the one asked for."""
    zones = list(spec["zones"])
    if asked is None:
        return zones
    if zones and asked not in zones:
        raise ValidationFailed(f"spec {spec['name']!r} is offered in {zones}, not {asked!r}")
    return [asked]


def instance_document(
    key: str,
    identity: Identity,
    tenant: TenantDoc,
    spec: SpecDoc,
    body: InstanceCreate,
    *,
    instance_id: str,
    idempotency_key: str | None,
    request_hash: str,
    zones: list[str],
    storages: list[Document],
    created: datetime,
) -> InstanceDoc:
    """A new instance as stored: `pending` when its quota was claimed, `queued` when it
    waits for the admission queue (`body.queue`), with that first transition in its
    history and its lifecycle event in the outbox for the controller to publish."""
    first = State.QUEUED if body.queue else State.PENDING
    doc: InstanceDoc = {
        "_id": key,
        "tenant_id": tenant["_id"],
        "instance_id": instance_id,
        "user_id": identity.subject,
        "idempotency_key": idempotency_key,
        "request_hash": request_hash,
        "spec_name": spec["name"],
        "gpu_type": spec["gpu_type"],
        "gpu_count": spec["gpu_num"],
        "gpu_resource": spec.get("gpu_resource", GPU_RESOURCE),
        "gpu_weight": spec.get("gpu_weight", "1"),
        "cpu": spec["cpu"],
        "memory": spec["memory"],
        "zones": zones,
        "image": body.image,
        "template": body.template.model_dump(by_alias=True),
        "storages": storages,
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
