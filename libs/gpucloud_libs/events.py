"""Event contracts: versioned pydantic models joined in one discriminated union.

Every producer and consumer imports these models. On the wire an event is a
CloudEvents 1.0 message in Kafka binary mode: the attributes travel as `ce_*`
headers, the payload is the model's JSON, and the message key is the event's
aggregate id so that order holds per aggregate (per instance, per tenant, ...).

A breaking change to a contract is a new model with a new `type` (`...v2`);
consumers accept both until producers have moved.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Annotated, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from .naming import GPU_RESOURCE, service_workload_id

SPEC_VERSION = "1.0"
CONTENT_TYPE = "application/json"


class EventData(BaseModel):
    """Base of every event payload."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: str

    @property
    def aggregate_id(self) -> str:
        """The id that orders this event; it becomes the Kafka message key."""
        raise NotImplementedError


# --- tenants (gateway -> instances, storage, metering) ---------------------------


class TenantQuota(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    max_gpus: int = Field(ge=0)
    max_instances: int = Field(ge=0)
    #: GPUs beyond max_gpus its batch jobs may borrow while idle (docs/queue.md).
    borrow_gpus: int = Field(default=0, ge=0)
    max_storage_bytes: int = Field(ge=0)
    monthly_spend_cap_cents: int | None = Field(default=None, ge=0)
    #: CPU and memory ceilings of the tenant's namespace; unset means derived
    #: from max_gpus by the instances service (see its settings).
    max_cpu_cores: int | None = Field(default=None, ge=0)
    max_memory_gib: int | None = Field(default=None, ge=0)


class TenantUpserted(EventData):
    """A tenant was created, or its quota or status changed. Carries the full state."""

    type: Literal["io.gpucloud.tenant.upserted.v1"] = "io.gpucloud.tenant.upserted.v1"
    tenant_id: str
    name: str
    status: Literal["active", "suspended"]
    quota: TenantQuota
    #: The tenant's weight in the admission queue's fair share (docs/queue.md).
    queue_weight: float = Field(default=1.0, gt=0)

    @property
    def aggregate_id(self) -> str:
        return self.tenant_id


class TenantDeleted(EventData):
    type: Literal["io.gpucloud.tenant.deleted.v1"] = "io.gpucloud.tenant.deleted.v1"
    tenant_id: str

    @property
    def aggregate_id(self) -> str:
        return self.tenant_id


# --- instances (instances -> metering, gateway) -----------------------------------

#: An exact fraction of a GPU: `1`, `1/7`, `3/7`, `1/4`.
GpuWeight = Annotated[str, Field(pattern=r"^[1-9][0-9]{0,3}(/[1-9][0-9]{0,3})?$")]

InstanceState = Literal[
    "queued", "pending", "scheduled", "ready", "running", "stopping", "stopped", "failed", "deleted"
]


class GpuHoldingTransition(EventData):
    """A transition of what holds GPUs and is billed for them: an instance, one run of
    a job, one replica of an inference service. Metering reads this shape alone; each
    kind adds its own ids and states. `sequence` orders one workload's transitions."""

    tenant_id: str
    user_id: str | None = None
    spec_name: str
    gpu_type: str
    gpu_count: int = Field(ge=0)
    #: The GPU kind its `gpu_count` units are, and one unit's part of a GPU (libs
    #: gpu_shares); whole GPUs when absent.
    gpu_resource: str = GPU_RESOURCE
    gpu_weight: GpuWeight = "1"
    zone: str | None = None
    node: str | None = None
    state: str
    sequence: int = Field(ge=0)
    at: AwareDatetime

    @property
    def workload_id(self) -> str:
        """What is billed, unique within the tenant: an instance id, `<job>/<run>`,
        or `svc--<service>/<replica>` (no instance id holds a `/` or a `--`). Not the
        quota's name of a job or a service (`naming.job_workload_id`): one job holds
        one claim, and each of its runs is billed."""
        raise NotImplementedError

    @property
    def of_job(self) -> str | None:
        """The job this is a run of."""
        return None

    @property
    def of_service(self) -> str | None:
        """The inference service this is a replica of."""
        return None


class InstanceStateChanged(GpuHoldingTransition):
    """One persisted lifecycle transition. Metering bills from these, so each is
    published exactly once per transition and `sequence` orders them per instance."""

    type: Literal["io.gpucloud.instance.state_changed.v1"] = "io.gpucloud.instance.state_changed.v1"
    instance_id: str
    state: InstanceState
    previous_state: InstanceState | None = None
    reason: str | None = None

    @property
    def aggregate_id(self) -> str:
        # Instance ids are unique per tenant (clients may choose them).
        return f"{self.tenant_id}/{self.instance_id}"

    @property
    def workload_id(self) -> str:
        return self.instance_id


# --- jobs (instances -> metering) --------------------------------------------------

#: `preempting`: its borrowed GPUs are taken back; it is `queued` again after.
JobState = Literal[
    "queued", "admitted", "running", "succeeded", "failed", "cancelled", "preempting"
]
#: A run is one pod of a job (an attempt, or one of its parallel pods). It holds its
#: GPUs from `scheduled` until it ends `succeeded` or `failed`.
JobRunState = Literal["scheduled", "running", "succeeded", "failed"]


class JobStateChanged(EventData):
    """One persisted transition of a batch job; `sequence` orders them per job."""

    type: Literal["io.gpucloud.job.state_changed.v1"] = "io.gpucloud.job.state_changed.v1"
    job_id: str
    tenant_id: str
    user_id: str | None = None
    spec_name: str
    state: JobState
    previous_state: JobState | None = None
    reason: str | None = None
    exit_code: int | None = None
    sequence: int = Field(ge=0)
    at: AwareDatetime

    @property
    def aggregate_id(self) -> str:
        return f"{self.tenant_id}/{self.job_id}"


class JobRunStateChanged(GpuHoldingTransition):
    """One transition of one run of a job. Metering bills runs as it bills instances:
    `sequence` orders a run's transitions, and the run holds `gpu_count` GPUs while
    `scheduled` or `running`."""

    type: Literal["io.gpucloud.job.run_state_changed.v1"] = "io.gpucloud.job.run_state_changed.v1"
    job_id: str
    #: Unique within the job: the suffix Kubernetes gave the run's pod.
    run_id: str
    state: JobRunState
    exit_code: int | None = None

    @property
    def aggregate_id(self) -> str:
        # The job's id: its runs' events stay in order with one another.
        return f"{self.tenant_id}/{self.job_id}"

    @property
    def workload_id(self) -> str:
        return f"{self.job_id}/{self.run_id}"

    @property
    def of_job(self) -> str:
        return self.job_id


ReplicaState = Literal["scheduled", "running", "ended"]


class ReplicaStateChanged(GpuHoldingTransition):
    """One transition of one replica of an inference service. Metering bills
    replicas as it bills instances: `sequence` orders a replica's transitions, and
    the replica holds `gpu_count` GPUs while `scheduled` or `running`."""

    type: Literal["io.gpucloud.inference.replica_state_changed.v1"] = (
        "io.gpucloud.inference.replica_state_changed.v1"
    )
    service_id: str
    #: Unique within the service: the suffix Kubernetes gave the replica's pod.
    replica_id: str
    #: The service's revision the replica runs.
    revision: int = Field(ge=1)
    state: ReplicaState

    @property
    def aggregate_id(self) -> str:
        # The service's id: its replicas' events stay in order with one another.
        return f"{self.tenant_id}/{self.service_id}"

    @property
    def workload_id(self) -> str:
        return f"{service_workload_id(self.service_id)}/{self.replica_id}"

    @property
    def of_service(self) -> str:
        return self.service_id


class InferenceServiceDeleted(EventData):
    """An inference service is gone, its last replica ended: what it was given (its
    storages' credentials) is revoked."""

    type: Literal["io.gpucloud.inference.service_deleted.v1"] = (
        "io.gpucloud.inference.service_deleted.v1"
    )
    service_id: str
    tenant_id: str
    at: AwareDatetime

    @property
    def aggregate_id(self) -> str:
        return f"{self.tenant_id}/{self.service_id}"


class StopTenantInstancesRequested(EventData):
    """Metering's hard budget stop asks the instances service to stop a tenant's instances."""

    type: Literal["io.gpucloud.instances.stop_requested.v1"] = (
        "io.gpucloud.instances.stop_requested.v1"
    )
    tenant_id: str
    reason: str

    @property
    def aggregate_id(self) -> str:
        return self.tenant_id


# --- storage (storage -> metering) -------------------------------------------------


class StorageUsageSampled(EventData):
    type: Literal["io.gpucloud.storage.usage_sampled.v1"] = "io.gpucloud.storage.usage_sampled.v1"
    storage_id: str
    tenant_id: str
    kind: Literal["object", "volume"]
    bytes_used: int = Field(ge=0)
    at: AwareDatetime

    @property
    def aggregate_id(self) -> str:
        return self.storage_id


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
    #: The node's seal, as a telemetry batch's.
    mac: str = ""

    @property
    def aggregate_id(self) -> str:
        return self.node


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


# --- metering (metering -> external billing, gateway) ----------------------------


class UsageRecorded(EventData):
    """A closed slice of usage, priced; external billing systems consume these."""

    type: Literal["io.gpucloud.usage.recorded.v1"] = "io.gpucloud.usage.recorded.v1"
    usage_id: str
    tenant_id: str
    subject_id: str  # instance or storage id
    meter: Literal["gpu_seconds", "storage_gb_hours"]
    #: Billed.
    quantity: float = Field(ge=0)
    #: Of the slice, on a node quarantined for a hardware fault: not billed, not in `quantity`.
    credited_quantity: float = Field(default=0, ge=0)
    start: AwareDatetime
    end: AwareDatetime
    amount_cents: float | None = None

    @property
    def aggregate_id(self) -> str:
        return self.tenant_id


class BudgetThresholdCrossed(EventData):
    type: Literal["io.gpucloud.billing.budget_threshold_crossed.v1"] = (
        "io.gpucloud.billing.budget_threshold_crossed.v1"
    )
    tenant_id: str
    period: str  # YYYY-MM
    threshold_pct: int = Field(ge=1)
    spent_cents: int = Field(ge=0)
    budget_cents: int = Field(ge=0)

    @property
    def aggregate_id(self) -> str:
        return self.tenant_id


# --- audit (gateway -> anyone) ------------------------------------------------------


class AuditRecorded(EventData):
    type: Literal["io.gpucloud.audit.recorded.v1"] = "io.gpucloud.audit.recorded.v1"
    audit_id: str
    tenant_id: str | None
    actor: str
    action: str
    resource: str
    result: int  # HTTP status
    at: AwareDatetime

    @property
    def aggregate_id(self) -> str:
        return self.tenant_id or "platform"


Event = Annotated[
    TenantUpserted
    | TenantDeleted
    | InstanceStateChanged
    | StopTenantInstancesRequested
    | StorageUsageSampled
    | TelemetryBatch
    | NodeInventory
    | NodeReleaseRequested
    | NodeQuarantineRequested
    | NodeHealthChanged
    | AlertStateChanged
    | JobStateChanged
    | JobRunStateChanged
    | ReplicaStateChanged
    | InferenceServiceDeleted
    | UsageRecorded
    | BudgetThresholdCrossed
    | AuditRecorded,
    Field(discriminator="type"),
]

_EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)


class MalformedEvent(ValueError):
    """A message that is not a valid gpucloud CloudEvent; it goes to a dead-letter topic."""


class CloudEvent(BaseModel):
    """The CloudEvents envelope around one event payload."""

    model_config = ConfigDict(frozen=True)

    id: str
    source: str
    time: AwareDatetime
    data: Event

    @property
    def type(self) -> str:
        return self.data.type

    @property
    def subject(self) -> str:
        return self.data.aggregate_id

    @classmethod
    def new(cls, data: EventData, *, source: str, event_id: str | None = None) -> CloudEvent:
        return cls.model_validate(
            {
                "id": event_id or str(uuid.uuid4()),
                "source": source,
                "time": datetime.now(UTC),
                "data": data,
            }
        )

    def to_kafka(self) -> tuple[bytes, bytes, dict[str, str]]:
        """Binary-mode encoding: (key, value, headers)."""
        headers = {
            "ce_specversion": SPEC_VERSION,
            "ce_id": self.id,
            "ce_source": self.source,
            "ce_type": self.type,
            "ce_time": self.time.isoformat(),
            "ce_subject": self.subject,
            "content-type": CONTENT_TYPE,
        }
        return self.subject.encode(), self.data.model_dump_json().encode(), headers

    @classmethod
    def from_kafka(cls, value: bytes, headers: dict[str, str]) -> CloudEvent:
        """Decode a binary-mode message; raises MalformedEvent with the reason."""
        if headers.get("ce_specversion") != SPEC_VERSION:
            raise MalformedEvent(f"ce_specversion must be {SPEC_VERSION!r}")
        missing = [
            name for name in ("ce_id", "ce_source", "ce_type", "ce_time") if not headers.get(name)
        ]
        if missing:
            raise MalformedEvent(f"missing CloudEvents headers: {', '.join(missing)}")
        try:
            data = _EVENT_ADAPTER.validate_json(value)
            envelope = cls.model_validate(
                {
                    "id": headers["ce_id"],
                    "source": headers["ce_source"],
                    "time": headers["ce_time"],
                    "data": data,
                }
            )
        except ValidationError as error:
            raise MalformedEvent(f"invalid payload: {error.errors(include_url=False)}") from error
        if envelope.type != headers["ce_type"]:
            raise MalformedEvent(
                f"ce_type {headers['ce_type']!r} does not match payload type {envelope.type!r}"
            )
        return envelope
