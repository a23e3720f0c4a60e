"""The instances service's stored documents, typed at the store boundary.

Every store method takes and returns these, so a misspelt field is a type
error rather than a KeyError at run time. Fields a projection leaves out, or
that older documents may lack, are NotRequired and read with `.get`.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Any, NotRequired, TypedDict

from gpucloud_libs.identity import Identity
from gpucloud_libs.naming import DEFAULT_PROJECT, project_namespace
from gpucloud_libs.outbox import OutboxEntry


class SpecDoc(TypedDict):
    _id: str  # the spec's name
    name: str
    cpu: str
    memory: str
    gpu_type: str
    gpu_num: int
    zones: list[str]
    created_at: datetime
    #: Shared GPUs (libs gpu_shares); absent on whole-GPU specs made before them.
    gpu_resource: NotRequired[str]
    gpu_weight: NotRequired[str]


class QuotaDoc(TypedDict):
    max_gpus: int
    max_instances: int
    #: GPUs beyond max_gpus its jobs may borrow (absent: 0).
    borrow_gpus: NotRequired[int]
    max_storage_bytes: int
    monthly_spend_cap_cents: int | None
    max_cpu_cores: int | None
    max_memory_gib: int | None


class UserLimitsDoc(TypedDict):
    """A user's own limits inside the tenant's quota (set by a tenant admin)."""

    max_gpus: int | None
    monthly_spend_cents: int | None


class SpendStopDoc(TypedDict):
    """Metering found the user's (or project's) spend of `period` at `limit_cents`."""

    period: str
    limit_cents: int


class ProjectDoc(TypedDict):
    """A project of the tenant (decision 138), as its last `tenant.upserted` said."""

    name: str
    max_gpus: int | None
    borrow_gpus: int
    monthly_budget_cents: int | None
    members: list[str]


class TenantFields(TypedDict):
    """A tenant as its last `tenant.upserted` event said, with what its namespace needs."""

    name: str
    status: str
    quota: QuotaDoc
    namespace_cpu: str
    namespace_memory: str
    namespace: str
    #: Its weight in the admission queue's fair share (absent: 1).
    queue_weight: NotRequired[float]
    #: Limits of its users that have any, by user id.
    user_limits: NotRequired[dict[str, UserLimitsDoc]]
    #: Its projects but `default`, by id.
    projects: NotRequired[dict[str, ProjectDoc]]
    updated_at: datetime
    #: A hash of what the namespace must reflect; the controller applies it when it differs.
    version: str


class TenantDoc(TenantFields):
    _id: str
    #: Users whose spend reached their monthly limit, by user id (written by the
    #: command handler, never by the tenant's events).
    spend_stops: NotRequired[dict[str, SpendStopDoc]]
    #: Projects whose spend reached their monthly budget, by project (decision 138).
    project_stops: NotRequired[dict[str, SpendStopDoc]]


class WorkloadSpecFields(TypedDict):
    """What every workload kind copies from its spec when it is admitted: it is placed
    and billed by these, whatever becomes of the spec later."""

    spec_name: str
    gpu_type: str
    #: GPUs of each pod (an instance's, a job's pod's, a replica's).
    gpu_count: int
    #: Shared GPUs (libs gpu_shares, `GpuShare.of`); absent: whole GPUs.
    gpu_resource: NotRequired[str]
    gpu_weight: NotRequired[str]
    cpu: str
    memory: str
    #: The zones it may run in: the spec's, narrowed by the request.
    zones: list[str]
    #: The cluster it was placed in (absent: the home cluster, where everything was
    #: placed before clusters were recorded), and that cluster's region then (billed
    #: by it: revenue by region).
    cluster: NotRequired[str]
    region: NotRequired[str]


class HistoryEntry(TypedDict):
    state: str
    at: datetime
    reason: str | None


class WorkloadDocFields(WorkloadSpecFields):
    """What every kind's stored workload has: its key (`<tenant>/<id>`), its tenant and
    namespace, and the storages it was given, as StorageClient.requested checked them
    (storageID and readOnly each)."""

    _id: str
    tenant_id: str
    namespace: str
    storages: list[dict[str, Any]]
    #: Who started it (the caller's subject: a user, or a key of no user).
    user_id: str | None
    #: The project it runs in (decision 138); absent: `default`, as before projects.
    project: NotRequired[str]


def workload_project(doc: WorkloadDocFields) -> str:
    """The project a stored workload runs in (`default` for one from before projects)."""
    return doc.get("project", DEFAULT_PROJECT)


def project_match(projects: Collection[str]) -> dict[str, Any]:
    """A store query's condition for the workloads of these projects (those from before
    projects name none, and are `default`'s)."""
    names: list[str | None] = [*sorted(projects)]
    if DEFAULT_PROJECT in projects:
        names.append(None)
    return {"project": {"$in": names}}


def in_project_view(doc: WorkloadDocFields | EndedServiceDoc, identity: Identity) -> bool:
    """Whether a workload shows to the caller: one of the projects it sees (decision
    142)."""
    return identity.sees_project(doc.get("project", DEFAULT_PROJECT))


def namespace_project(doc: WorkloadDocFields) -> str:
    """The project whose namespace the workload's pods run in: its own, or `default`
    for work admitted in a project before projects had namespaces (it kept the
    tenant's), whose storages' Secrets go there too."""
    project = workload_project(doc)
    return (
        project
        if doc["namespace"] == project_namespace(doc["tenant_id"], project)
        else DEFAULT_PROJECT
    )


def tenant_namespaces(tenant: TenantDoc) -> dict[str, str]:
    """The namespace of each of the tenant's projects, `default`'s (the tenant's own)
    first (decision 138)."""
    projects = [DEFAULT_PROJECT, *sorted(tenant.get("projects") or {})]
    return {project: project_namespace(tenant["_id"], project) for project in projects}


class InstanceDoc(WorkloadDocFields):
    instance_id: str
    idempotency_key: str | None
    request_hash: str
    image: str
    template: dict[str, Any]
    state: str
    reason: str | None
    message: str | None
    #: Transitions recorded so far; each lifecycle event carries its number.
    sequence: int
    history: list[HistoryEntry]
    #: Recorded transitions not yet published; left out of list pages.
    outbox: NotRequired[list[OutboxEntry]]
    has_outbox: bool
    admitted: bool
    node: str | None
    zone: str | None
    pod_ip: NotRequired[str | None]
    from_stock: bool
    #: Its place among the tenant's queued workloads (absent: 0).
    priority: NotRequired[int]
    #: While queued: why it waits, as the admission queue's last pass said.
    queue_reason: NotRequired[str | None]
    created_at: datetime
    updated_at: datetime


class JobRunDoc(TypedDict):
    """One run (pod) of a job, as the controller last recorded it."""

    state: str
    #: Transitions of this run recorded so far; its events carry their number.
    sequence: int
    node: str | None
    zone: str | None
    #: Bound to its node: from here on it holds its GPUs, and is billed.
    scheduled_at: datetime | None
    started_at: datetime | None
    ended_at: datetime | None
    exit_code: int | None
    #: Which admission of the job it belongs to (absent: the first).
    admission: NotRequired[int]


class JobDoc(WorkloadDocFields):
    job_id: str
    idempotency_key: str | None
    request_hash: str
    image: str
    command: list[str] | None
    args: list[str] | None
    #: The pods' env and volumes, as an instance template holds them.
    template: dict[str, Any]
    parallelism: int
    #: A multi-node job's pods (then `parallelism` and `completions` too): a JobSet.
    nodes: NotRequired[int | None]
    completions: int
    retry_limit: int
    deadline_seconds: int | None
    priority: int
    state: str
    reason: str | None
    message: str | None
    exit_code: int | None
    #: Set once its quota claim passed; the queue orders the rest.
    admitted_at: datetime | None
    #: How often it was admitted: more than once after a preemption (absent: 0 or 1).
    admissions: NotRequired[int]
    #: Why it waits, as the admission queue's last pass said: quota, capacity, priority.
    queue_reason: NotRequired[str | None]
    runs: dict[str, JobRunDoc]
    #: Transitions of the job recorded so far; its own events carry their number.
    sequence: int
    #: Changes of the document, job or run, for writers' optimistic guards.
    revision: int
    history: list[HistoryEntry]
    outbox: NotRequired[list[OutboxEntry]]
    has_outbox: bool
    created_at: datetime
    updated_at: datetime


class ServingTemplateDoc(TypedDict):
    """What makes a revision (schemas.ServingTemplate, by alias)."""

    image: str
    env: list[dict[str, str]]
    command: list[str] | None
    args: list[str] | None
    volumes: list[dict[str, Any]]
    #: Absent from revisions stored before it existed.
    runAsUser: NotRequired[int | None]


class ServiceConfigDoc(TypedDict):
    """One generation of an inference service's desired state. Only ever inserted:
    `_id` is `<key>@<generation>`, so two concurrent changes cannot both make the
    same generation (the unique `_id` refuses the second)."""

    _id: str
    key: str  # <tenant>/<service>
    generation: int
    #: Counts template changes: equal generations may share a revision.
    revision: int
    template: ServingTemplateDoc
    min_replicas: int
    max_replicas: int
    max_surge: int
    max_unavailable: int
    #: schemas.Autoscaling by alias, or None: `min_replicas` replicas always.
    autoscaling: dict[str, Any] | None
    rolled_back_from: int | None
    created_at: datetime


class ServiceReplicaDoc(TypedDict):
    name: str
    revision: int
    node: str | None
    address: str | None
    ready: bool
    terminating: bool


class ReplicaRunDoc(TypedDict):
    """A replica's billing record: its transitions as its events said them."""

    #: scheduled, running or ended (events.ReplicaState)
    state: str
    #: Transitions of this replica recorded so far; its events carry their number.
    sequence: int
    revision: int
    node: str | None
    zone: str | None
    #: Bound to its node: from here on it holds its GPUs, and is billed.
    scheduled_at: datetime | None
    ended_at: datetime | None


class ScaleDoc(TypedDict):
    """The autoscaler's state of a service (the controller's)."""

    replicas: int
    #: When the gateway last reported a request in flight.
    busy_at: datetime | None
    #: Since when fewer replicas have been wanted than run (a scale-down waits).
    lower_since: datetime | None


class EndedServiceDoc(TypedDict):
    """What is kept of a deleted inference service: its replica runs, which its bill
    was read from."""

    _id: str  # <tenant>/<service>@<incarnation>
    key: str
    tenant_id: str
    service_id: str
    incarnation: str
    spec_name: str
    gpu_count: int
    created_at: datetime
    deleted_at: datetime
    runs: dict[str, ReplicaRunDoc]
    #: The project it ran in (absent: `default`, or kept before keys of one project):
    #: what a key of one project sees of it (decision 139).
    project: NotRequired[str]


class ServiceDoc(WorkloadDocFields):
    """An inference service: inserted by the API with what never changes, then
    written only by the controller's worker for it (observed state)."""

    service_id: str
    #: Random per creation: the service's requests (its deletion) are keyed by it,
    #: so a request left over from an earlier service of the same name is not its.
    incarnation: str
    zone: str | None
    port: int
    readiness_path: str
    created_at: datetime
    #: Why it cannot make progress (a storage refused), or None.
    message: NotRequired[str | None]
    #: The generation the Deployment was last made to match; 0 before the first.
    applied_generation: int
    applied_revision: int
    #: The live replicas as last observed: what the gateway balances over.
    replicas: list[ServiceReplicaDoc]
    #: Every replica ever scheduled, by replica id, until the service is removed.
    runs: dict[str, ReplicaRunDoc]
    #: None until the controller's first pass sized it.
    scale: ScaleDoc | None
    #: The replica count last set on the Deployment.
    applied_replicas: NotRequired[int]
    #: Changes of the document, for the controller's optimistic guard.
    version: int
    outbox: NotRequired[list[OutboxEntry]]
    has_outbox: bool
    updated_at: datetime
