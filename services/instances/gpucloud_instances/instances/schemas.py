"""Request and response models of the instances API."""

from __future__ import annotations

from datetime import datetime

from pydantic import (
    Field,
)

from gpucloud_libs.http import ApiModel

from ..schemas import (
    DnsLabel,
    ImageRef,
    InstanceId,
    InstanceTemplate,
    LabelValue,
    ProjectRef,
    QueuePosition,
    StorageId,
    Transition,
)


class InstanceCreate(ApiModel):
    #: Client-chosen id, unique within the tenant; retrying with it is idempotent.
    instance_id: InstanceId | None = Field(default=None, alias="instanceID")
    image: ImageRef
    spec_name: DnsLabel
    #: The project it runs in (a member's, or any to a tenant admin); left out,
    #: `default`, or the key's own project for a key of one (decision 139).
    project: ProjectRef | None = None
    zone: LabelValue | None = None
    #: The region to run in (a cluster's, GET /v1/regions); the platform picks one
    #: that has the spec's GPUs when left out.
    region: LabelValue | None = None
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


class Instance(ApiModel):
    instance_id: str = Field(alias="instanceID")
    tenant_id: str = Field(alias="tenantID")
    state: str
    reason: str | None = None
    message: str | None = None
    spec_name: str
    #: The project it runs in (decision 138).
    project: str = "default"
    gpu_type: str
    gpu_count: int
    image: str
    #: The cluster it was placed in (GET /v1/clusters, platform admins).
    cluster: str
    zone: str | None = None
    node: str | None = None
    from_stock: bool = False
    #: While `queued`: its place in the tenant's admission queue, and why it waits.
    queue: QueuePosition | None = None
    priority: int = 0
    #: A stop was asked for and is being carried out.
    stop_requested: bool = False
    #: A start was asked of this stopped or failed instance and is still to be carried
    #: out (GET of one instance, and the start's answer): once it is false and the
    #: instance is still stopped, the start was refused, and `message` says why.
    start_requested: bool = False
    #: Counts the instance's state transitions. GET with `afterRevision` set to it
    #: answers at the next transition or change of `message` (or after `waitSeconds`),
    #: instead of polling.
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
