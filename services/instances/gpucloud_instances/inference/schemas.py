"""Request and response models of the inference services API."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Self

from pydantic import (
    Field,
    model_validator,
)

from gpucloud_libs.http import ApiModel

from ..schemas import (
    DnsLabel,
    EnvVar,
    ImageRef,
    InstanceId,
    LabelValue,
    ProjectRef,
    RunAsUser,
    StorageId,
    VolumeSpec,
    _check_env_and_volumes,
)

#: An HTTP path a replica answers its readiness on.
HttpPath = Annotated[str, Field(pattern=r"^/[\x21-\x7e]*$", max_length=256)]


class UpdateStrategy(ApiModel):
    """How a new revision replaces the old one's replicas (Kubernetes' rolling update)."""

    #: Replicas of the new revision started above the desired count at once.
    max_surge: int = Field(default=1, ge=0, le=64)
    #: Replicas that may be missing from the desired count during the update.
    max_unavailable: int = Field(default=0, ge=0, le=64)

    @model_validator(mode="after")
    def _moves(self) -> Self:
        if self.max_surge == 0 and self.max_unavailable == 0:
            raise ValueError("maxSurge and maxUnavailable cannot both be 0: nothing could move")
        return self


class ServingTemplate(ApiModel):
    """What makes a revision: a change to any of it rolls out a new one."""

    image: ImageRef
    env: list[EnvVar] = Field(default_factory=list, max_length=128)
    #: The container's entrypoint and its arguments; the image's own when left out.
    command: list[Annotated[str, Field(max_length=4096)]] | None = Field(
        default=None, max_length=64
    )
    args: list[Annotated[str, Field(max_length=4096)]] | None = Field(default=None, max_length=256)
    #: Scratch space per replica (`storageID` is not taken yet).
    volumes: list[VolumeSpec] = Field(default_factory=list, max_length=16)
    run_as_user: RunAsUser = None

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        _check_env_and_volumes(self.env, self.volumes)
        if any(volume.storage_id for volume in self.volumes):
            raise ValueError("an inference service's volumes are scratch space: no storageID")
        return self


class Autoscaling(ApiModel):
    """Replicas sized to the requests in flight the gateway sees (between minReplicas
    and maxReplicas): ceil(in flight / targetInFlight)."""

    #: Requests in flight per replica the autoscaler aims at.
    target_in_flight: float = Field(gt=0, le=10_000)
    #: A lower replica count is applied only once it has been wanted this long.
    scale_down_delay_s: int = Field(default=60, ge=0, le=3600, alias="scaleDownDelaySeconds")
    #: With minReplicas 0: this long without a request scales the service to zero.
    scale_to_zero_after_s: int = Field(
        default=300, ge=1, le=7 * 24 * 3600, alias="scaleToZeroAfterSeconds"
    )


class InferenceServiceCreate(ServingTemplate):
    #: Client-chosen id, unique within the tenant; the service's host is built from it.
    service_id: InstanceId | None = Field(default=None, alias="serviceID")
    spec_name: DnsLabel
    #: The project it runs in (a member's, or any to a tenant admin); left out,
    #: `default`, or the key's own project for a key of one (decision 139).
    project: ProjectRef | None = None
    #: Object storages every replica gets S3 credentials for, as an instance does (the
    #: service's for its life; a volume storage cannot be shared by replicas).
    storage_ids: list[StorageId] = Field(default_factory=list, alias="storageIDs", max_length=16)
    zone: LabelValue | None = None
    #: The region to run in (a cluster's, GET /v1/regions); the platform picks one
    #: that has the spec's GPUs when left out.
    region: LabelValue | None = None
    #: The one port replicas serve on, and where the gateway checks they are ready.
    port: int = Field(ge=1, le=65535)
    readiness_path: HttpPath = "/"
    #: 0 (with autoscaling) scales the service to zero when it gets no requests.
    min_replicas: int = Field(default=1, ge=0, le=64)
    #: The most replicas the service may run; its quota claim is this many replicas' GPUs.
    max_replicas: int | None = Field(default=None, ge=1, le=64)
    strategy: UpdateStrategy = Field(default_factory=UpdateStrategy)
    autoscaling: Autoscaling | None = None

    @model_validator(mode="after")
    def _bounds(self) -> Self:
        if self.max_replicas is not None and self.max_replicas < self.min_replicas:
            raise ValueError("maxReplicas cannot be below minReplicas")
        if self.min_replicas == 0 and self.autoscaling is None:
            raise ValueError("minReplicas 0 needs autoscaling, which brings replicas back")
        return self


class InferenceServicePatch(ApiModel):
    """Fields left out keep their value. A new image, env, command, args, volumes or
    runAsUser make a new revision; replica counts and the strategy apply to the current one."""

    image: ImageRef | None = None
    env: list[EnvVar] | None = Field(default=None, max_length=128)
    command: list[Annotated[str, Field(max_length=4096)]] | None = Field(
        default=None, max_length=64
    )
    args: list[Annotated[str, Field(max_length=4096)]] | None = Field(default=None, max_length=256)
    volumes: list[VolumeSpec] | None = Field(default=None, max_length=16)
    run_as_user: RunAsUser = None
    min_replicas: int | None = Field(default=None, ge=0, le=64)
    max_replicas: int | None = Field(default=None, ge=1, le=64)
    strategy: UpdateStrategy | None = None
    autoscaling: Autoscaling | None = None


class RollbackRequest(ApiModel):
    #: The earlier revision whose template becomes the next revision.
    revision: int = Field(ge=1)


class ServiceRevision(ApiModel):
    revision: int
    image: str
    created_at: datetime
    #: Set when this revision was made by a rollback: the revision it copies.
    rolled_back_from: int | None = None


class ServiceReplica(ApiModel):
    """One pod of the service, as the controller last saw it."""

    name: str
    revision: int
    node: str | None = None
    #: Serving: ready and not being removed; the gateway sends it requests.
    ready: bool = False
    #: Being removed: the gateway sends it no new requests while it finishes.
    terminating: bool = False


class ReplicaRun(ApiModel):
    """One replica's billed interval, as recorded: from its binding to a node to its
    end. A service's GPU time is the sum over its replicas of (end - scheduled) x
    GPUs, which a tenant can check against its usage to the microsecond."""

    replica_id: str = Field(alias="replicaID")
    revision: int
    node: str | None = None
    zone: str | None = None
    #: scheduled, running or ended.
    state: str
    scheduled_at: datetime | None = None
    #: None while it still holds its GPUs.
    ended_at: datetime | None = None
    #: What its bill is read from beside its interval: the spec and GPUs of each replica,
    #: and when its service was created (nothing of it is billed before).
    spec_name: str
    gpu_count: int
    service_created_at: datetime
    #: A replica of an earlier use of the service's name, deleted since: kept, since it
    #: was billed.
    deleted: bool = False


class ReplicaRunPage(ApiModel):
    items: list[ReplicaRun]


class InferenceService(ApiModel):
    service_id: str = Field(alias="serviceID")
    tenant_id: str = Field(alias="tenantID")
    #: `deploying` until the desired replicas of the current revision are ready,
    #: then `ready`; `updating` while a new revision rolls out; `idle` when scaled
    #: to zero; `deleting`.
    state: str
    url: str
    spec_name: str
    #: The project it runs in (decision 138).
    project: str = "default"
    gpu_type: str
    #: GPUs of each replica.
    gpu_count: int
    #: The cluster it was placed in (GET /v1/clusters, platform admins).
    cluster: str
    zone: str | None = None
    storage_ids: list[str] = Field(default_factory=list, alias="storageIDs")
    port: int
    readiness_path: str
    #: Why the service cannot make progress, when it cannot (a storage gone).
    message: str | None = None
    image: str
    env: list[EnvVar] = Field(default_factory=list)
    command: list[str] | None = None
    args: list[str] | None = None
    volumes: list[VolumeSpec] = Field(default_factory=list)
    run_as_user: int | None = Field(default=None, alias="runAsUser")
    min_replicas: int
    max_replicas: int
    strategy: UpdateStrategy
    autoscaling: Autoscaling | None = None
    #: The revision being served or rolled out.
    revision: int
    desired_replicas: int
    ready_replicas: int
    #: Ready replicas of the current revision.
    updated_replicas: int
    replicas: list[ServiceReplica] = Field(default_factory=list)
    revisions: list[ServiceRevision] = Field(default_factory=list)
    created_at: datetime
    updated_at: datetime


class InferenceServicePage(ApiModel):
    items: list[InferenceService]
    next_cursor: str | None = None


class ServiceLoad(ApiModel):
    service_id: str = Field(alias="serviceID", max_length=64)
    #: Mean requests in flight over the report's interval.
    in_flight: float = Field(ge=0, le=1_000_000)


class ServiceLoadReport(ApiModel):
    """One gateway replica's view of its tenant's services (the gateway's alone)."""

    gateway: str = Field(min_length=1, max_length=128)
    services: list[ServiceLoad] = Field(max_length=10_000)


class ServiceEndpoints(ApiModel):
    """Where the gateway sends a service's requests: its serving replicas."""

    service_id: str = Field(alias="serviceID")
    port: int
    readiness_path: str
    addresses: list[str]
