"""Event contracts of the fleet (agent -> monitoring -> instances, metering): GPU
telemetry and inventory, the operator's node health requests, node health and alerts.
Part of the union in events.py, which every producer and consumer imports."""

from __future__ import annotations

from typing import Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from .event_base import EventData

# --- monitoring (agent -> monitoring -> instances, metering) --------------------


class GpuSample(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    gpu_uuid: str
    index: int = Field(ge=0)
    at: AwareDatetime
    utilization_gpu_pct: float = Field(ge=0, le=100)
    utilization_memory_pct: float = Field(ge=0, le=100)
    memory_used_mib: float = Field(ge=0)
    memory_total_mib: float = Field(ge=0)
    temperature_c: float
    power_w: float = Field(ge=0)
    sm_clock_mhz: float | None = None
    memory_clock_mhz: float | None = None
    throttle_reasons: int = 0
    ecc_corrected: int = Field(default=0, ge=0)
    ecc_uncorrected: int = Field(default=0, ge=0)
    pcie_tx_kibps: float | None = None
    pcie_rx_kibps: float | None = None
    xid_errors: tuple[int, ...] = ()
    #: The instance whose processes use the GPU, where the runtime can tell
    #: (instance ids are unique per tenant, so both are given).
    instance_id: str | None = None
    tenant_id: str | None = None
    #: A slice of a shared GPU (a MIG device, or a time-sliced replica in the
    #: simulator): the physical GPU it is part of, and its MIG profile or `replica`.
    #: Its health readings are the physical GPU's; `index` is the physical GPU's.
    parent_gpu_uuid: str | None = None
    slice: str | None = None


class TelemetryBatch(EventData):
    type: Literal["io.gpucloud.telemetry.batch.v1"] = "io.gpucloud.telemetry.batch.v1"
    node: str
    source: Literal["nvml", "simulated"]
    samples: tuple[GpuSample, ...] = Field(min_length=1)
    #: The node's seal (`node_seals`): only the agent on `node` holds its key.
    mac: str = ""

    @property
    def aggregate_id(self) -> str:
        return self.node


class GpuInventory(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    gpu_uuid: str
    index: int = Field(ge=0)
    name: str
    serial: str | None = None
    memory_total_mib: float = Field(ge=0)
    driver_version: str | None = None
    cuda_version: str | None = None
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None
    pcie_width_current: int | None = None
    pcie_width_max: int | None = None
    mig_mode: bool | None = None
    nvlink_links_active: int | None = None


class NodeInventory(EventData):
    """What a node's agent found: published at its start and now and then after."""

    type: Literal["io.gpucloud.node.inventory.v1"] = "io.gpucloud.node.inventory.v1"
    node: str
    source: Literal["nvml", "simulated"]
    gpus: tuple[GpuInventory, ...] = ()
    #: Set when the node has no usable NVML (no driver, no GPU): why.
    unavailable_reason: str | None = None
    at: AwareDatetime
    #: The cluster the node is in, as its agent was told (GPUCLOUD_CLUSTER_NAME);
    #: None: the platform's home cluster.
    cluster: str | None = None
    #: The node's zone (topology.kubernetes.io/zone), where its agent knows it (the
    #: simulator reads its nodes' labels): a cluster the monitoring service cannot
    #: ask has its nodes' zones from here.
    zone: str | None = None
    #: The node's seal, as a telemetry batch's.
    mac: str = ""

    @property
    def aggregate_id(self) -> str:
        return self.node


class ClusterNodes(EventData):
    """The nodes a registered cluster has, as the instances service's controller
    watches them: what the monitoring service takes telemetry from besides its own
    cluster's nodes. Said for each cluster every resync; none: the cluster is gone."""

    type: Literal["io.gpucloud.cluster.nodes.v1"] = "io.gpucloud.cluster.nodes.v1"
    cluster: str
    nodes: tuple[str, ...] = Field(default=(), max_length=50_000)
    at: AwareDatetime

    @property
    def aggregate_id(self) -> str:
        return self.cluster


class NodeReleaseRequested(EventData):
    """An operator returns a node to service. It travels on the telemetry topic, keyed
    by node, so the consumer that owns the node's health applies it in order."""

    type: Literal["io.gpucloud.node.release_requested.v1"] = "io.gpucloud.node.release_requested.v1"
    node: str
    requested_by: str
    at: AwareDatetime
    #: The monitoring service's seal (HMAC-SHA256 of the rest): the node agent writes to
    #: this topic too, and must not be able to ask for a release (review M4).
    mac: str = ""

    @property
    def aggregate_id(self) -> str:
        return self.node


class NodeQuarantineRequested(EventData):
    """An operator takes a node out of service (a suspect GPU, maintenance). Like a
    release, it travels on the telemetry topic keyed by node, in order with its samples;
    the node stays quarantined until released."""

    type: Literal["io.gpucloud.node.quarantine_requested.v1"] = (
        "io.gpucloud.node.quarantine_requested.v1"
    )
    node: str
    requested_by: str
    reason: str
    at: AwareDatetime
    #: The monitoring service's seal, as a release's.
    mac: str = ""

    @property
    def aggregate_id(self) -> str:
        return self.node


#: What an operator asks of a node's health.
NodeHealthRequest = NodeReleaseRequested | NodeQuarantineRequested

NodeHealth = Literal["healthy", "degraded", "quarantined"]


class NodeHealthChanged(EventData):
    type: Literal["io.gpucloud.node.health_changed.v1"] = "io.gpucloud.node.health_changed.v1"
    node: str
    #: The registered cluster the node is in; None: the monitoring service's own.
    cluster: str | None = None
    health: NodeHealth
    previous_health: NodeHealth | None = None
    reasons: tuple[str, ...] = ()
    at: AwareDatetime

    @property
    def aggregate_id(self) -> str:
        return self.node


class AlertStateChanged(EventData):
    type: Literal["io.gpucloud.alert.state_changed.v1"] = "io.gpucloud.alert.state_changed.v1"
    alert_id: str
    rule_id: str
    tenant_id: str | None = None  # None for fleet-wide rules
    state: Literal["firing", "resolved"]
    severity: Literal["info", "warning", "critical"]
    subject: str  # the GPU, node or instance the rule matched
    metric: str
    value: float
    threshold: float
    at: AwareDatetime
    #: A resolution not by the metric recovering: `rule_deleted` or `rule_disabled`.
    resolution: str | None = None
    #: `stop_instance`: a stop-when-idle rule; the instances service stops `instance_id`
    #: when it fires.
    action: Literal["notify", "stop_instance"] = "notify"
    instance_id: str | None = None

    @property
    def aggregate_id(self) -> str:
        return self.alert_id
