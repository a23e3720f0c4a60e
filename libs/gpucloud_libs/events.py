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

from .event_base import EventData
from .fleet_events import (
    AlertStateChanged,
    ClusterNodes,
    GpuInventory,
    GpuSample,
    NodeHealth,
    NodeHealthChanged,
    NodeHealthRequest,
    NodeInventory,
    NodeQuarantineRequested,
    NodeReleaseRequested,
    TelemetryBatch,
)
from .workload_events import (
    GpuHoldingTransition,
    GpuWeight,
    InferenceServiceDeleted,
    InstanceState,
    InstanceStateChanged,
    JobRunState,
    JobRunStateChanged,
    JobState,
    JobStateChanged,
    ProjectBudgetReached,
    ReplicaState,
    ReplicaStateChanged,
    StopTenantInstancesRequested,
    UserSpendLimitReached,
)

#: The contracts, here and in their parts (workload_events, fleet_events): every one is
#: imported from this module.
__all__ = [
    "CONTENT_TYPE",
    "SPEC_VERSION",
    "AlertStateChanged",
    "AuditRecorded",
    "BudgetThresholdCrossed",
    "CloudEvent",
    "ClusterNodes",
    "Event",
    "EventData",
    "GpuHoldingTransition",
    "GpuInventory",
    "GpuSample",
    "GpuWeight",
    "InferenceServiceDeleted",
    "InstanceState",
    "InstanceStateChanged",
    "JobRunState",
    "JobRunStateChanged",
    "JobState",
    "JobStateChanged",
    "MalformedEvent",
    "NodeHealth",
    "NodeHealthChanged",
    "NodeHealthRequest",
    "NodeInventory",
    "NodeQuarantineRequested",
    "NodeReleaseRequested",
    "ProjectBudgetReached",
    "ReplicaState",
    "ReplicaStateChanged",
    "StopTenantInstancesRequested",
    "StorageUsageSampled",
    "TelemetryBatch",
    "TenantDeleted",
    "TenantQuota",
    "TenantUpserted",
    "UsageRecorded",
    "UserAccessEnded",
    "UserLimits",
    "UserSpendLimitReached",
]

SPEC_VERSION = "1.0"
CONTENT_TYPE = "application/json"


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


class UserLimits(BaseModel):
    """One user's own ceilings inside the tenant's quota; unset means only the tenant's."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: GPUs the user's workloads may hold at once (every kind together).
    max_gpus: int | None = Field(default=None, ge=0)
    #: What the user's workloads may cost per calendar month, in cents.
    monthly_spend_cents: int | None = Field(default=None, ge=0)


class ProjectShare(BaseModel):
    """A project of the tenant: its members and its share of the tenant's quota
    (decision 138). Unset GPUs: only the tenant's quota holds its work."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    max_gpus: int | None = Field(default=None, ge=0)
    #: GPUs beyond max_gpus its jobs may borrow of the tenant's idle ones.
    borrow_gpus: int = Field(default=0, ge=0)
    monthly_budget_cents: int | None = Field(default=None, ge=0)
    members: list[str] = Field(default_factory=list)


class TenantUpserted(EventData):
    """A tenant was created, or its quota or status changed. Carries the full state."""

    type: Literal["io.gpucloud.tenant.upserted.v1"] = "io.gpucloud.tenant.upserted.v1"
    tenant_id: str
    name: str
    status: Literal["active", "suspended"]
    quota: TenantQuota
    #: The tenant's weight in the admission queue's fair share (docs/queue.md).
    queue_weight: float = Field(default=1.0, gt=0)
    #: Limits of the tenant's users that have any, by user id.
    user_limits: dict[str, UserLimits] = Field(default_factory=dict)
    #: The tenant's projects but `default` (which holds the rest), by project id.
    projects: dict[str, ProjectShare] = Field(default_factory=dict)

    @property
    def aggregate_id(self) -> str:
        return self.tenant_id


class UserAccessEnded(EventData):
    """A user was disabled or removed: what they hold outside the gateway's keys and
    sessions ends too (their kubectl credential, `gpucloud kubeconfig`)."""

    type: Literal["io.gpucloud.user.access_ended.v1"] = "io.gpucloud.user.access_ended.v1"
    tenant_id: str
    user_id: str

    @property
    def aggregate_id(self) -> str:
        return self.tenant_id


class TenantDeleted(EventData):
    type: Literal["io.gpucloud.tenant.deleted.v1"] = "io.gpucloud.tenant.deleted.v1"
    tenant_id: str

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
    #: The project whose monthly budget it is (decision 138); None: the tenant's.
    project: str | None = None

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
    | UserAccessEnded
    | InstanceStateChanged
    | StopTenantInstancesRequested
    | UserSpendLimitReached
    | ProjectBudgetReached
    | StorageUsageSampled
    | TelemetryBatch
    | NodeInventory
    | ClusterNodes
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
