"""An inference service's stored documents, built purely: the service, its first
configuration, the next one a change or a roll-back makes, and what each claims of
the quota."""

from __future__ import annotations

import secrets
from datetime import datetime

from pydantic import ValidationError

from gpucloud_libs.clock import now
from gpucloud_libs.errors import Conflict, ValidationFailed
from gpucloud_libs.gpu_shares import GpuShare
from gpucloud_libs.http import field_errors
from gpucloud_libs.identity import Identity
from gpucloud_libs.mongo import Document
from gpucloud_libs.naming import project_namespace

from ..documents import (
    ServiceConfigDoc,
    ServiceDoc,
    ServingTemplateDoc,
    TenantDoc,
    WorkloadSpecFields,
)
from ..schemas import STORED
from ..store import instance_key
from .schemas import (
    Autoscaling,
    InferenceServiceCreate,
    InferenceServicePatch,
    ServingTemplate,
    UpdateStrategy,
)


def claimed_gpus(config: ServiceConfigDoc, share: GpuShare, units_per_replica: int) -> int:
    """What a service holds of its tenant's quota: its most replicas, plus the surge."""
    return share.quota_gpus((config["max_replicas"] + config["max_surge"]) * units_per_replica)


def autoscaling_doc(autoscaling: Autoscaling | None) -> dict[str, object] | None:
    return None if autoscaling is None else autoscaling.model_dump(by_alias=True)


def template_doc(template: ServingTemplate) -> ServingTemplateDoc:
    dumped = template.model_dump(by_alias=True, mode="json")
    return {
        "image": dumped["image"],
        "env": dumped["env"],
        "command": dumped["command"],
        "args": dumped["args"],
        "volumes": dumped["volumes"],
        "runAsUser": dumped["runAsUser"],
    }


def latest_revision(configs: list[ServiceConfigDoc]) -> int:
    return max(config["revision"] for config in configs)


def next_config(
    current: ServiceConfigDoc,
    *,
    template: ServingTemplateDoc,
    revision: int,
    min_replicas: int,
    max_replicas: int,
    strategy: UpdateStrategy,
    autoscaling: dict[str, object] | None,
    rolled_back_from: int | None,
) -> ServiceConfigDoc:
    generation = current["generation"] + 1
    return {
        "_id": f"{current['key']}@{generation}",
        "key": current["key"],
        "generation": generation,
        "revision": revision,
        "template": template,
        "min_replicas": min_replicas,
        "max_replicas": max_replicas,
        "max_surge": strategy.max_surge,
        "max_unavailable": strategy.max_unavailable,
        "autoscaling": autoscaling,
        "rolled_back_from": rolled_back_from,
        "created_at": now(),
    }


def first_configuration(
    key: str, body: InferenceServiceCreate, created: datetime
) -> ServiceConfigDoc:
    """A new service's first configuration: generation 1, revision 1."""
    return {
        "_id": f"{key}@1",
        "key": key,
        "generation": 1,
        "revision": 1,
        "template": template_doc(body),
        "min_replicas": body.min_replicas,
        "max_replicas": body.max_replicas or body.min_replicas,
        "max_surge": body.strategy.max_surge,
        "max_unavailable": body.strategy.max_unavailable,
        "autoscaling": autoscaling_doc(body.autoscaling),
        "rolled_back_from": None,
        "created_at": created,
    }


def service_document(
    service_id: str,
    identity: Identity,
    tenant: TenantDoc,
    placed: WorkloadSpecFields,
    body: InferenceServiceCreate,
    *,
    storages: list[Document],
    created: datetime,
    project: str,
) -> ServiceDoc:
    """A new service as stored: what never changes (`placed`: its spec's shape, zones
    and cluster, `spec_fields`), and nothing observed yet."""
    doc: ServiceDoc = {
        "_id": instance_key(tenant["_id"], service_id),
        "tenant_id": tenant["_id"],
        "service_id": service_id,
        "incarnation": secrets.token_hex(4),
        "user_id": identity.subject,
        "project": project,
        # mypy wants a ** item to name the optional keys too; those the kind
        # sets later stay absent.
        **placed,  # type: ignore[typeddict-item]
        "zone": body.zone,
        "storages": storages,
        "port": body.port,
        "readiness_path": body.readiness_path,
        "namespace": project_namespace(tenant["_id"], project),
        "created_at": created,
        "applied_generation": 0,
        "applied_revision": 0,
        "replicas": [],
        "runs": {},
        "scale": None,
        "version": 0,
        "outbox": [],
        "has_outbox": False,
        "updated_at": created,
    }
    return doc


def patched_template(stored: ServingTemplateDoc, body: InferenceServicePatch) -> ServingTemplate:
    """The current revision's template with the patch's fields on top. The stored
    revision may predate a request rule, and the patch was checked strictly as it came
    in; together they must still make one template, or the patch is a 422."""
    changed = body.model_dump(
        by_alias=True,
        exclude_unset=True,
        include={"image", "env", "command", "args", "volumes", "run_as_user"},
    )
    try:
        return ServingTemplate.model_validate({**stored, **changed}, context=STORED)
    except ValidationError as error:
        raise ValidationFailed(
            "with this change the service's template is not valid: "
            + "; ".join(item["msg"] for item in error.errors()),
            errors=field_errors(error.errors(), under=("body",)),
        ) from None


def patched_scaling(
    current: ServiceConfigDoc, body: InferenceServicePatch
) -> tuple[int, int, dict[str, object] | None]:
    """(min replicas, max replicas, autoscaling) after the patch, each kept where the
    patch says nothing; a 409 for bounds that cannot hold together."""
    min_replicas = current["min_replicas"] if body.min_replicas is None else body.min_replicas
    max_replicas = body.max_replicas or current["max_replicas"]
    autoscaling = (
        autoscaling_doc(body.autoscaling)
        if "autoscaling" in body.model_fields_set
        else current["autoscaling"]
    )
    if max_replicas < min_replicas:
        raise Conflict(
            f"minReplicas {min_replicas} is above maxReplicas {max_replicas}",
            min_replicas=min_replicas,
            max_replicas=max_replicas,
        )
    if min_replicas == 0 and autoscaling is None:
        raise Conflict(
            "minReplicas 0 needs autoscaling, which brings replicas back",
            min_replicas=min_replicas,
        )
    return min_replicas, max_replicas, autoscaling
