"""Request and response models of the instances API (field names follow seed 004)."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Literal, Self

from pydantic import (
    AfterValidator,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from gpucloud_libs.http import ApiModel
from gpucloud_libs.naming import ID_PATTERN, storage_claim_name

DnsLabel = Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$")]


#: An instance id is a field of its hosts (libs naming): no `--` in it.
InstanceId = Annotated[str, Field(pattern=ID_PATTERN, max_length=40)]


#: Values that end up as Kubernetes label values (GPU product, zone).
LabelValue = Annotated[str, Field(pattern=r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")]


StorageId = Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$")]


Quantity = Annotated[
    str, Field(pattern=r"^[0-9]+(\.[0-9]+)?(m|k|Ki|M|Mi|G|Gi|T|Ti)?$", max_length=32)
]


class PortSpec(ApiModel):
    port: int = Field(ge=1, le=65535)
    protocol: Literal["TCP", "UDP", "SCTP"] = "TCP"
    is_public: bool = False
    is_probe: bool = False
    #: Path prefix the workload serves under; also the HTTP readiness path of the probe port.
    base_url: str | None = Field(default=None, pattern=r"^/[\x21-\x7e]*$", max_length=256)


#: Environment names that select GPUs or driver capabilities below the allocation:
#: with the NVIDIA container toolkit's defaults, `NVIDIA_VISIBLE_DEVICES=all` in a
#: pod's env reaches every GPU of the node, other tenants' included (docs/security.md).
#: The device plugin sets these; a tenant may not.
_DEVICE_SELECTORS = re.compile(
    r"^(NVIDIA_.*|CUDA_VISIBLE_DEVICES|CUDA_MPS_.*|GPU_DEVICE_ORDINAL|ROCR_VISIBLE_DEVICES"
    r"|HIP_VISIBLE_DEVICES)$",
    re.IGNORECASE,
)


#: Validation context for what the service reads back from its own documents: rules
#: added for requests since (device selectors) do not make an old record unreadable.
STORED = {"stored": True}


def is_device_selector(name: str) -> bool:
    """Whether an environment variable chooses GPUs or driver features itself."""
    return _DEVICE_SELECTORS.match(name) is not None


class EnvVar(ApiModel):
    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=128)
    value: str = Field(max_length=32768)

    @field_validator("name")
    @classmethod
    def _not_a_device_selector(cls, name: str, info: ValidationInfo) -> str:
        if not (info.context or {}).get("stored") and is_device_selector(name):
            raise ValueError(
                f"{name} selects GPUs or driver features below the allocation; the platform "
                "sets it from the GPUs the workload was given"
            )
        return name


class VolumeSpec(ApiModel):
    name: DnsLabel
    mount_path: str = Field(pattern=r"^/[^\x00]*$", max_length=512)
    read_only: bool = False
    #: A volume storage of the tenant, mounted as its PVC; without one, scratch space.
    storage_id: StorageId | None = Field(default=None, alias="storageID")

    @property
    def claim_name(self) -> str | None:
        return storage_claim_name(self.storage_id) if self.storage_id else None


#: The user the container runs as, when the image's own is root or a name: tenant pods
#: run with runAsNonRoot, and a kubelet starts such an image only with a non-zero uid.
RunAsUser = Annotated[int | None, Field(default=None, ge=1, le=2**31 - 1, alias="runAsUser")]


class InstanceTemplate(ApiModel):
    ports: list[PortSpec] = Field(default_factory=list, max_length=16)
    envs: list[EnvVar] = Field(default_factory=list, max_length=128)
    #: A shell command line, run with `/bin/sh -c` (seed 004's `cmd`)...
    cmd: str | None = Field(default=None, max_length=16384)
    #: ...or the container's entrypoint and arguments as lists, as Kubernetes and the
    #: catalog's templates give them (no shell; either may be left to the image).
    command: list[Annotated[str, Field(max_length=4096)]] | None = Field(
        default=None, max_length=256
    )
    args: list[Annotated[str, Field(max_length=4096)]] | None = Field(default=None, max_length=256)
    volumes: list[VolumeSpec] = Field(default_factory=list, max_length=16)
    run_as_user: RunAsUser = None

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.cmd and (self.command or self.args):
            raise ValueError("give either `cmd` (a shell line) or `command`/`args`, not both")
        ports = [port.port for port in self.ports]
        if len(set(ports)) != len(ports):
            raise ValueError("port numbers must be unique")
        if sum(port.is_probe for port in self.ports) > 1:
            raise ValueError("at most one port can be the readiness probe (isProbe)")
        _check_env_and_volumes(self.envs, self.volumes)
        return self


def _check_env_and_volumes(envs: list[EnvVar], volumes: list[VolumeSpec]) -> None:
    """What an instance's and a job's containers both need: unique names and mounts."""
    if len({env.name for env in envs}) != len(envs):
        raise ValueError("environment variable names must be unique")
    if len({volume.name for volume in volumes}) != len(volumes):
        raise ValueError("volume names must be unique")
    if len({volume.mount_path for volume in volumes}) != len(volumes):
        raise ValueError("volume mount paths must be unique")


#: A container image reference, as Kubernetes takes it.
DOCKER_HUB = "docker.io"


#: Registry names that only mean something on the node's own network.
_LOCAL_SUFFIXES = (
    ".local",
    ".localhost",
    ".localdomain",
    ".internal",
    ".svc",
    ".lan",
    ".home.arpa",
)


_NUMERIC_LABEL = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$")


def image_registry(image: str) -> str:
    """The registry host of an image reference, as the container runtime reads it: the
    first path part when it holds a `.`, a `:` or a capital letter (a repository name
    cannot), or is `localhost`, else Docker Hub."""
    first, slash, _ = image.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost" or first != first.lower()):
        return first.lower()
    return DOCKER_HUB


def _pulled_by_public_name(image: str) -> str:
    """The kubelet pulls from the node's network, outside the tenant's egress policy and
    with whatever the node may reach (review M10): a registry must be named by a public
    DNS name, never an address (cloud metadata, a node port) or a local name."""
    registry = image_registry(image)
    host = registry if registry.startswith("[") else registry.rsplit(":", 1)[0]
    labels = host.split(".")
    if (
        host.startswith("[")
        or len(labels) < 2
        or all(_NUMERIC_LABEL.match(label) for label in labels)
        or host.endswith(_LOCAL_SUFFIXES)
    ):
        raise ValueError(
            f"the image's registry {registry!r} is an address or a local name, which the "
            "node would pull from on its own network: name the registry by its public DNS name"
        )
    return image


ImageRef = Annotated[
    str,
    Field(min_length=1, max_length=512, pattern=r"^\S+$"),
    AfterValidator(_pulled_by_public_name),
]


class InstanceCreate(ApiModel):
    #: Client-chosen id, unique within the tenant; retrying with it is idempotent.
    instance_id: InstanceId | None = Field(default=None, alias="instanceID")
    image: ImageRef
    spec_name: DnsLabel
    zone: LabelValue | None = None
    #: Storages the instance uses. Object storages arrive as S3 credentials in
    #: environment variables; volume storages are mounted by a template volume.
    storage_ids: list[StorageId] = Field(default_factory=list, alias="storageIDs", max_length=16)
    template: InstanceTemplate = Field(default_factory=InstanceTemplate)
    #: Wait in the admission queue, with the tenant's batch jobs, while the quota or
    #: the free GPUs are short, instead of being refused (quota) or failing after the
    #: schedule timeout (no free GPU). Such a start answers `queued`.
    queue: bool = False
    #: Within the tenant's queue, a higher priority is admitted first (with `queue`).
    priority: int = Field(default=0, ge=-1000, le=1000)


class QueuePosition(ApiModel):
    """Why a queued job or instance waits, and what is ahead of it."""

    #: 1 for the tenant's next workload (job or instance) to be admitted.
    position: int
    #: `quota`: the tenant's quota has no room yet; `capacity`: no free GPUs of its
    #: type (or a bigger workload of that type waits ahead of it); `priority`: a
    #: workload of higher priority of the same tenant goes first; `reclaim`: GPUs
    #: borrowed by another tenant are being taken back for it; `admission`: not yet
    #: placed.
    reason: str
    #: GPUs the tenant's workloads ahead of it ask for.
    gpus_ahead: int


class Transition(ApiModel):
    state: str
    at: datetime
    reason: str | None = None


class QuotaUse(ApiModel):
    """The caller's tenant's quota and what its workloads hold of it now: what a start
    may still take."""

    max_gpus: int
    max_instances: int
    #: GPUs beyond maxGpus its jobs may borrow while other tenants' GPUs sit idle.
    borrow_gpus: int
    #: GPUs held by its instances, jobs' runs and services' replicas.
    gpus_in_use: int
    #: Workloads holding quota (an instance, a job, a service each count once).
    workloads_in_use: int


class Instance(ApiModel):
    instance_id: str = Field(alias="instanceID")
    tenant_id: str = Field(alias="tenantID")
    state: str
    reason: str | None = None
    message: str | None = None
    spec_name: str
    gpu_type: str
    gpu_count: int
    image: str
    zone: str | None = None
    node: str | None = None
    from_stock: bool = False
    #: While `queued`: its place in the tenant's admission queue, and why it waits.
    queue: QueuePosition | None = None
    priority: int = 0
    #: A stop was asked for and is being carried out.
    stop_requested: bool = False
    #: Counts the instance's state transitions. GET with `afterRevision` set to it
    #: answers at the next transition (or after `waitSeconds`), instead of polling.
    revision: int = 0
    urls: list[str] = Field(default_factory=list)
    created_at: datetime
    updated_at: datetime
    history: list[Transition] = Field(default_factory=list)


class InstanceEndpoint(ApiModel):
    """One public port of a running instance, as the gateway's instance-URL proxy reaches it."""

    instance_id: str = Field(alias="instanceID")
    port: int
    address: str


class InstancePage(ApiModel):
    items: list[Instance]
    next_cursor: str | None = None


class JobCreate(ApiModel):
    #: Client-chosen id, unique within the tenant; retrying with it is idempotent.
    job_id: InstanceId | None = Field(default=None, alias="jobID")
    image: ImageRef
    #: The container's entrypoint and its arguments; the image's own when left out.
    command: list[Annotated[str, Field(max_length=4096)]] | None = Field(
        default=None, max_length=64
    )
    args: list[Annotated[str, Field(max_length=4096)]] | None = Field(default=None, max_length=256)
    env: list[EnvVar] = Field(default_factory=list, max_length=128)
    run_as_user: RunAsUser = None
    spec_name: DnsLabel
    zone: LabelValue | None = None
    #: As for instances: object storages arrive as S3 credentials in environment
    #: variables; volume storages are mounted by one of `volumes`.
    storage_ids: list[StorageId] = Field(default_factory=list, alias="storageIDs", max_length=16)
    volumes: list[VolumeSpec] = Field(default_factory=list, max_length=16)
    #: Pods that run at once, each with the spec's GPUs.
    parallelism: int = Field(default=1, ge=1, le=64)
    #: A multi-node job: this many pods, each on a node of its own with the spec's
    #: GPUs, admitted and started together or not at all, and restarted together (up
    #: to `retryLimit` times) when one fails. Runs as a JobSet; instead of
    #: `parallelism` and `completions`.
    nodes: int | None = Field(default=None, ge=2, le=64)
    #: Successful pods that complete the job; `parallelism` when left out.
    completions: int | None = Field(default=None, ge=1, le=1024)
    #: Failed pods retried before the job fails (Kubernetes' backoffLimit).
    retry_limit: int = Field(default=0, ge=0, le=20)
    #: Seconds from admission after which the job fails with `deadline_exceeded`.
    deadline_seconds: int | None = Field(default=None, ge=1, le=30 * 24 * 3600)
    #: Within a tenant, a higher priority is admitted first (ties: oldest first).
    priority: int = Field(default=0, ge=-1000, le=1000)

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        _check_env_and_volumes(self.env, self.volumes)
        if self.nodes is not None and (self.parallelism != 1 or self.completions is not None):
            raise ValueError("a multi-node job gives nodes, not parallelism or completions")
        return self

    @property
    def pods(self) -> int:
        """Pods that run at once."""
        return self.nodes or self.parallelism

    @property
    def template(self) -> InstanceTemplate:
        """What the pods share with an instance's: env, volumes and user (no ports)."""
        return InstanceTemplate(envs=self.env, volumes=self.volumes, run_as_user=self.run_as_user)


class JobRun(ApiModel):
    """One pod of the job: an attempt, or one of its parallel pods."""

    run_id: str = Field(alias="runID")
    state: str
    node: str | None = None
    exit_code: int | None = None
    #: Bound to its node: its GPUs are held, and billed, from here to `endedAt`.
    scheduled_at: datetime | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None


class Job(ApiModel):
    job_id: str = Field(alias="jobID")
    tenant_id: str = Field(alias="tenantID")
    state: str
    reason: str | None = None
    message: str | None = None
    exit_code: int | None = None
    queue: QueuePosition | None = None
    spec_name: str
    gpu_type: str
    #: GPUs of each pod; the job holds `gpuCount * parallelism` at most.
    gpu_count: int
    image: str
    #: The entrypoint and its arguments as submitted; None where the image's own run.
    command: list[str] | None = None
    args: list[str] | None = None
    parallelism: int
    completions: int
    #: Set for a multi-node job (a JobSet): its pods, one per node, all or nothing.
    nodes: int | None = None
    retry_limit: int
    deadline_seconds: int | None = None
    priority: int
    cancel_requested: bool = False
    succeeded_runs: int = 0
    failed_runs: int = 0
    runs: list[JobRun] = Field(default_factory=list)
    revision: int = 0
    created_at: datetime
    updated_at: datetime
    history: list[Transition] = Field(default_factory=list)


class JobPage(ApiModel):
    items: list[Job]
    next_cursor: str | None = None


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
    #: Object storages every replica gets S3 credentials for, as an instance does (the
    #: service's for its life; a volume storage cannot be shared by replicas).
    storage_ids: list[StorageId] = Field(default_factory=list, alias="storageIDs", max_length=16)
    zone: LabelValue | None = None
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
    gpu_type: str
    #: GPUs of each replica.
    gpu_count: int
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
