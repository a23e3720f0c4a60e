"""The monitoring service's stored documents, typed at the store boundary.

A misspelt field is a type error rather than a KeyError at run time. Fields
a later step adds are NotRequired and read with `.get`. A GPU's inventory
record is what the node agent reported (libs `GpuInventory`) plus its tier.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, NotRequired, TypedDict


class RollupDoc(TypedDict):
    """One GPU's window (a minute or an hour) for one user of it."""

    _id: str  # <gpu>@<start>#<tenant>/<instance>
    gpu_uuid: str
    #: The physical GPU of a slice (a MIG device); absent or None for a whole GPU.
    parent_gpu_uuid: NotRequired[str | None]
    node: str
    tenant_id: str | None
    instance_id: str | None
    start: datetime
    width_s: int
    samples: int
    memory_total_mib: float
    ecc_corrected: int
    ecc_uncorrected: int
    xids: list[int]
    utilization_gpu_pct_avg: float
    utilization_gpu_pct_max: float
    utilization_memory_pct_avg: float
    utilization_memory_pct_max: float
    memory_used_mib_avg: float
    memory_used_mib_max: float
    temperature_c_avg: float
    temperature_c_max: float
    power_w_avg: float
    power_w_max: float


class GpuStatus(TypedDict):
    """A GPU as its newest minute left it."""

    tenant_id: str | None
    instance_id: str | None
    parent_gpu_uuid: NotRequired[str | None]
    utilization_gpu_pct_avg: float
    memory_used_mib_avg: float
    memory_total_mib: float
    temperature_c_avg: float
    power_w_avg: float


class NodeStatusFields(TypedDict):
    minute: datetime
    gpus: dict[str, GpuStatus]  # by GPU uuid


class NodeStatusDoc(NodeStatusFields):
    _id: str  # the node


class InventoryFields(TypedDict):
    source: str  # nvml | simulated
    gpus: list[dict[str, Any]]  # GpuInventory's fields, `tier` and `tier_reasons`
    unavailable_reason: str | None
    at: datetime
    #: The cluster the node is in, as its agent says (None: the home cluster).
    cluster: NotRequired[str | None]
    #: Its zone, as its agent says (read where the cluster's labels cannot be).
    zone: NotRequired[str | None]


class InventoryDoc(InventoryFields):
    _id: str  # the node


class HealthFields(TypedDict):
    health: str  # healthy | degraded | quarantined
    previous: str
    reasons: list[str]
    since: datetime
    published: bool


class HealthDoc(HealthFields):
    _id: str  # the node


class RuleDoc(TypedDict):
    _id: str
    tenant_id: str | None  # None: a fleet rule
    name: str
    metric: str
    comparison: str
    threshold: float
    duration_s: float
    severity: str
    node: str | None
    webhook_url: str | None
    #: notify | stop_instance (absent: notify)
    action: NotRequired[str]
    #: Sealed (webhook_secrets.py); shown to the tenant only when it is made.
    webhook_secret: NotRequired[str | None]
    enabled: bool
    created_by: str
    created_at: datetime


class AlertDoc(TypedDict):
    _id: str  # from rule, GPU and episode start, so a replay finds the same alert
    rule_id: str
    tenant_id: str | None  # the rule's tenant
    subject_tenant_id: str | None  # whose instance the GPU ran, if anyone's
    instance_id: str | None
    action: NotRequired[str]  # the rule's: notify | stop_instance
    state: str  # firing | resolved
    severity: str
    subject: str
    node: str
    metric: str
    comparison: str
    threshold: float
    value: float
    since: datetime
    fired_at: datetime
    resolved_at: datetime | None
    resolved_value: NotRequired[float]
    resolution: NotRequired[str | None]
    published_firing: bool
    published_resolved: bool


class DeliveryDoc(TypedDict):
    _id: str  # <alert>:<state>
    rule_id: str
    url: str
    #: The rule's webhook secret when it was enqueued, sealed; None: sent unsigned.
    secret: NotRequired[str | None]
    payload: dict[str, Any]
    state: str  # pending | delivered | failed
    attempts: int
    next_at: datetime
    last_error: str | None
    delivered_at: NotRequired[datetime]
