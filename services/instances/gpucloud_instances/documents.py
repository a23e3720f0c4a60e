"""The instances service's stored documents, typed at the store boundary.

Every store method takes and returns these, so a misspelt field is a type
error rather than a KeyError at run time. Fields a projection leaves out, or
that older documents may lack, are NotRequired and read with `.get`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, NotRequired, TypedDict

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


class QuotaDoc(TypedDict):
    max_gpus: int
    max_instances: int
    max_storage_bytes: int
    monthly_spend_cap_cents: int | None
    max_cpu_cores: int | None
    max_memory_gib: int | None


class TenantFields(TypedDict):
    """A tenant as its last `tenant.upserted` event said, with what its namespace needs."""

    name: str
    status: str
    quota: QuotaDoc
    namespace_cpu: str
    namespace_memory: str
    namespace: str
    updated_at: datetime
    #: A hash of what the namespace must reflect; the controller applies it when it differs.
    version: str


class TenantDoc(TenantFields):
    _id: str


class HistoryEntry(TypedDict):
    state: str
    at: datetime
    reason: str | None


class InstanceDoc(TypedDict):
    _id: str  # <tenant>/<instance>
    tenant_id: str
    instance_id: str
    user_id: str | None
    idempotency_key: str | None
    request_hash: str
    spec_name: str
    gpu_type: str
    gpu_count: int
    cpu: str
    memory: str
    zones: list[str]
    image: str
    template: dict[str, Any]
    #: What the storage service checked at admission: storageID and readOnly each.
    storages: list[dict[str, Any]]
    namespace: str
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
    created_at: datetime
    updated_at: datetime


class StockUnitDoc(TypedDict):
    _id: str  # the placeholder pod's name
    spec_name: str
    state: str  # placing | available
    node: str | None
    zone: str | None
    created_at: datetime


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


class JobDoc(TypedDict):
    _id: str  # <tenant>/<job>
    tenant_id: str
    job_id: str
    user_id: str | None
    idempotency_key: str | None
    request_hash: str
    spec_name: str
    gpu_type: str
    #: GPUs of each pod.
    gpu_count: int
    cpu: str
    memory: str
    zones: list[str]
    image: str
    command: list[str] | None
    args: list[str] | None
    #: The pods' env and volumes, as an instance template holds them.
    template: dict[str, Any]
    storages: list[dict[str, Any]]
    parallelism: int
    completions: int
    retry_limit: int
    deadline_seconds: int | None
    priority: int
    namespace: str
    state: str
    reason: str | None
    message: str | None
    exit_code: int | None
    #: Set once its quota claim passed; the queue orders the rest.
    admitted_at: datetime | None
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
