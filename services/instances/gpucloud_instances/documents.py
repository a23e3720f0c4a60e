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
