"""Request and response models of the monitoring API."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from gpucloud_libs.http import ApiModel

from .rules import Comparison, Metric

Severity = Literal["info", "warning", "critical"]
Resolution = Literal["1m", "1h"]


RuleAction = Literal["notify", "stop_instance"]


class AlertRuleCreate(ApiModel):
    name: str = Field(min_length=1, max_length=128)
    metric: Metric
    comparison: Comparison = ">"
    threshold: float
    #: How long the condition must hold before the alert fires.
    duration_s: float = Field(default=60, ge=0, le=86_400)
    severity: Severity = "warning"
    #: `stop_instance`: stop-when-idle. The rule holds for an instance when it holds
    #: for every GPU of it (its busiest GPU is below the threshold), and the instance
    #: is stopped when it fires. Tenant rules only, with `<` or `<=`.
    action: RuleAction = "notify"
    #: Fleet rules only (platform admin): watch one node.
    node: str | None = Field(default=None, max_length=253)
    #: POSTed each transition as JSON, retried with backoff.
    webhook_url: str | None = Field(default=None, alias="webhookURL", max_length=2048)


class AlertRuleUpdate(ApiModel):
    name: str | None = Field(default=None, min_length=1, max_length=128)
    threshold: float | None = None
    duration_s: float | None = Field(default=None, ge=0, le=86_400)
    severity: Severity | None = None
    webhook_url: str | None = Field(default=None, alias="webhookURL", max_length=2048)
    enabled: bool | None = None


class AlertRule(ApiModel):
    rule_id: str = Field(alias="ruleID")
    #: None for fleet rules.
    tenant_id: str | None = Field(default=None, alias="tenantID")
    name: str
    metric: str
    comparison: str
    threshold: float
    duration_s: float
    severity: str
    node: str | None = None
    webhook_url: str | None = Field(default=None, alias="webhookURL")
    #: The webhook's signing secret: only in the answer that made it (a new webhook,
    #: or a rotation); keep it, it is not shown again.
    webhook_secret: str | None = Field(default=None, alias="webhookSecret")
    action: RuleAction = "notify"
    enabled: bool
    created_at: datetime


class Alert(ApiModel):
    alert_id: str = Field(alias="alertID")
    rule_id: str = Field(alias="ruleID")
    state: Literal["firing", "resolved"]
    severity: str
    #: The GPU (UUID) the rule matched.
    subject: str
    node: str
    instance_id: str | None = Field(default=None, alias="instanceID")
    #: What the rule did: `stop_instance` stopped `instanceID` when it fired.
    action: str = "notify"
    metric: str
    comparison: str
    threshold: float
    value: float
    fired_at: datetime
    resolved_at: datetime | None = None
    #: Why it resolved, when not by the metric recovering: `rule_deleted`, `rule_disabled`.
    resolution: str | None = None


class GpuView(ApiModel):
    gpu_uuid: str = Field(alias="gpuUUID")
    node: str
    index: int
    #: The name NVML gives the GPU (`NVIDIA H100 80GB HBM3`)...
    name: str
    #: ...and its type as specs and node labels name it (`NVIDIA-H100-80GB-HBM3`).
    gpu_type: str
    tier: str
    tier_reasons: list[str] = Field(default_factory=list)
    memory_total_mib: float
    health: str
    instance_id: str | None = Field(default=None, alias="instanceID")
    #: Platform admin only: whose instance uses it, and the hardware identity.
    tenant_id: str | None = Field(default=None, alias="tenantID")
    serial: str | None = None
    driver_version: str | None = None
    cuda_version: str | None = None
    pcie_gen_current: int | None = None
    pcie_width_current: int | None = None
    mig_mode: bool | None = None
    nvlink_links_active: int | None = None
    #: The last complete minute.
    utilization_gpu_pct: float | None = None
    temperature_c: float | None = None


class MetricPoint(ApiModel):
    start: datetime
    gpus: int
    utilization_gpu_pct: float
    utilization_gpu_pct_max: float
    utilization_memory_pct: float
    memory_used_mib: float
    temperature_c: float
    temperature_c_max: float
    power_w: float
    ecc_uncorrected: int
    xids: list[int]


class MetricSeries(ApiModel):
    subject: str
    resolution: Resolution
    points: list[MetricPoint]


class NodeKey(ApiModel):
    """A node agent's key for sealing its node's telemetry (gpucloud_libs.node_seals)."""

    node: str
    #: URL-safe base64 of the key's 32 bytes.
    key: str


class NodeQuarantine(ApiModel):
    """Why the operator takes the node out: kept in the node's health reasons."""

    reason: str = Field(min_length=1, max_length=200)


class NodeView(ApiModel):
    node: str
    #: The cluster it is in, as its agent says (None: not said, the home cluster).
    cluster: str | None = None
    zone: str | None = None
    gpu_type: str | None = None
    gpus: int
    tiers: list[str]
    health: str
    health_reasons: list[str]
    health_since: datetime | None = None
    gpus_in_use: int
    utilization_gpu_pct: float | None = None
    #: "nvml" or "simulated"; None before the node's first inventory.
    telemetry: str | None = None
    unavailable_reason: str | None = None


class FleetGroup(ApiModel):
    zone: str
    gpu_type: str
    nodes: int
    gpus: int
    gpus_in_use: int
    utilization_gpu_pct: float | None = None
    quarantined_nodes: int


class Capacity(ApiModel):
    """Free whole GPUs of one type in one zone, for anyone choosing where to start."""

    zone: str
    gpu_type: str
    #: Free GPUs on each healthy node, most first, without the nodes' names: a spec of
    #: N GPUs fits `sum(free // N)` times.
    free_by_node: list[int]


class FleetSummary(ApiModel):
    nodes: int
    gpus: int
    gpus_in_use: int
    by_tier: dict[str, int]
    by_health: dict[str, int]
    groups: list[FleetGroup]
