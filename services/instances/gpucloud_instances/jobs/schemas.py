"""Request and response models of the jobs API."""

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
    InstanceTemplate,
    LabelValue,
    ProjectRef,
    QueuePosition,
    RunAsUser,
    StorageId,
    Transition,
    VolumeSpec,
    _check_env_and_volumes,
)


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
    #: The project it runs in (a member's, or any to a tenant admin); left out,
    #: `default`, or the key's own project for a key of one (decision 139).
    project: ProjectRef | None = None
    zone: LabelValue | None = None
    #: The region to run in (a cluster's, GET /v1/regions); the platform picks one
    #: that has the spec's GPUs when left out.
    region: LabelValue | None = None
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
    #: The project it runs in (decision 138).
    project: str = "default"
    gpu_type: str
    #: GPUs of each pod; the job holds `gpuCount * parallelism` at most.
    gpu_count: int
    image: str
    #: The cluster it was placed in (GET /v1/clusters, platform admins).
    cluster: str
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
