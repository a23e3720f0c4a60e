"""An inference service as the API shows it: its state, replicas, revisions and every
replica it ran, read from its stored documents."""

from __future__ import annotations

from gpucloud_libs.clock import aware, aware_or_none

from ..documents import (
    EndedServiceDoc,
    ServiceConfigDoc,
    ServiceDoc,
    ServiceReplicaDoc,
    workload_project,
)
from ..schemas import STORED, EnvVar, VolumeSpec
from .schemas import (
    Autoscaling,
    InferenceService,
    ReplicaRun,
    ReplicaRunPage,
    ServiceReplica,
    ServiceRevision,
    UpdateStrategy,
)


class ServiceState:
    DEPLOYING = "deploying"
    READY = "ready"
    UPDATING = "updating"
    IDLE = "idle"
    DELETING = "deleting"


def service_view(
    doc: ServiceDoc, configs: list[ServiceConfigDoc], *, url: str, deleting: bool, cluster: str
) -> InferenceService:
    """A service as the API shows it: its current configuration, its replicas and
    revisions, and a state read from them."""
    current = configs[-1]
    template = current["template"]
    replicas = doc["replicas"]
    serving = [r for r in replicas if r["ready"] and not r["terminating"]]
    updated = [r for r in serving if r["revision"] == current["revision"]]
    scale = doc.get("scale")
    desired = current["min_replicas"] if scale is None else scale["replicas"]
    state = service_state(doc, current, desired, len(updated), deleting=deleting)
    return InferenceService(
        service_id=doc["service_id"],
        tenant_id=doc["tenant_id"],
        state=state,
        url=url,
        spec_name=doc["spec_name"],
        project=workload_project(doc),
        gpu_type=doc["gpu_type"],
        gpu_count=doc["gpu_count"],
        cluster=cluster,
        zone=doc["zone"],
        storage_ids=[str(storage["storageID"]) for storage in doc.get("storages") or []],
        port=doc["port"],
        readiness_path=doc["readiness_path"],
        message=doc.get("message"),
        image=template["image"],
        env=[EnvVar.model_validate(env, context=STORED) for env in template["env"]],
        command=template["command"],
        args=template["args"],
        volumes=[VolumeSpec.model_validate(volume) for volume in template["volumes"]],
        run_as_user=template.get("runAsUser"),
        min_replicas=current["min_replicas"],
        max_replicas=current["max_replicas"],
        strategy=UpdateStrategy(
            max_surge=current["max_surge"], max_unavailable=current["max_unavailable"]
        ),
        autoscaling=(
            None
            if current["autoscaling"] is None
            else Autoscaling.model_validate(current["autoscaling"])
        ),
        revision=current["revision"],
        desired_replicas=0 if deleting else desired,
        ready_replicas=len(serving),
        updated_replicas=len(updated),
        replicas=[replica_view(r) for r in replicas],
        revisions=revisions_view(configs),
        created_at=aware(doc["created_at"]),
        updated_at=aware(doc["updated_at"]),
    )


def replica_view(replica: ServiceReplicaDoc) -> ServiceReplica:
    return ServiceReplica(
        name=replica["name"], revision=replica["revision"], node=replica["node"],
        ready=replica["ready"], terminating=replica["terminating"],
    )  # fmt: skip


def service_state(
    doc: ServiceDoc, current: ServiceConfigDoc, desired: int, updated: int, *, deleting: bool
) -> str:
    """Deleting; updating while replicas of another revision run (or the Deployment is
    still at another); idle at zero; ready once `desired` replicas (at least one) of the
    current revision serve; deploying until then."""
    revision = current["revision"]
    if deleting:
        return ServiceState.DELETING
    others = [r for r in doc["replicas"] if r["revision"] != revision]
    if others or (doc["applied_revision"] and doc["applied_revision"] != revision):
        return ServiceState.UPDATING
    if desired == 0 and not doc["replicas"]:
        return ServiceState.IDLE
    if updated >= max(desired, 1):
        return ServiceState.READY
    return ServiceState.DEPLOYING


def revisions_view(configs: list[ServiceConfigDoc]) -> list[ServiceRevision]:
    """Each revision once, from the generation that made it."""
    seen: dict[int, ServiceRevision] = {}
    for config in configs:
        if config["revision"] not in seen:
            seen[config["revision"]] = ServiceRevision(
                revision=config["revision"],
                image=config["template"]["image"],
                created_at=aware(config["created_at"]),
                rolled_back_from=config["rolled_back_from"],
            )
    return list(seen.values())


def replica_runs_view(uses: list[tuple[EndedServiceDoc | ServiceDoc, bool]]) -> ReplicaRunPage:
    """Every replica each use of a service's name ran, deleted ones flagged, oldest first
    (those never scheduled last)."""
    runs = [
        ReplicaRun(
            replica_id=replica_id, revision=run["revision"], node=run["node"],
            zone=run["zone"], state=run["state"],
            scheduled_at=aware_or_none(run["scheduled_at"]),
            ended_at=aware_or_none(run["ended_at"]), spec_name=use["spec_name"],
            gpu_count=use["gpu_count"], service_created_at=aware(use["created_at"]),
            deleted=deleted,
        )
        for use, deleted in uses
        for replica_id, run in use["runs"].items()
    ]  # fmt: skip
    runs.sort(key=lambda run: (run.scheduled_at is None, run.scheduled_at, run.replica_id))
    return ReplicaRunPage(items=runs)
