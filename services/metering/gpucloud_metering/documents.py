"""The metering service's stored documents, typed at the store boundary.

Facts are insert-only and keyed by their natural id, so a replay is a
duplicate key. A misspelt field is a type error rather than a KeyError at
run time; fields older facts may lack are NotRequired and read with `.get`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal, NamedTuple, NotRequired, TypedDict


class TransitionDoc(TypedDict):
    """A transition of a billed workload: an instance, or one run of a batch job."""

    _id: str  # <tenant>/<workload>#<sequence>
    event_id: str
    tenant_id: str
    #: The instance's id, or `<job>/<run>` for a job's run.
    instance_id: str
    #: The job a run belongs to; instances and older facts have none.
    job_id: NotRequired[str | None]
    #: The inference service whose replica this is (`instance_id` is `svc--<service>/<replica>`).
    service_id: NotRequired[str | None]
    sequence: int
    state: str
    at_us: int
    spec_name: str
    gpu_type: str
    #: Units held: whole GPUs, or slices of shared ones (`gpu_resource`), each weighing
    #: `gpu_weight` of a GPU (an exact fraction); facts from before them are whole GPUs.
    gpu_count: int
    gpu_resource: NotRequired[str]
    gpu_weight: NotRequired[str]
    zone: str | None
    node: NotRequired[str | None]  # facts recorded before nodes were lack it
    #: The cluster it ran in and that cluster's region; facts from before clusters
    #: were (or without one) lack them.
    cluster: NotRequired[str | None]
    region: NotRequired[str | None]
    user_id: str | None
    #: The tenant's project it ran in; facts from before projects lack it (`default`).
    project: NotRequired[str]
    #: When metering recorded it, on its own clock: usage records wait for it to settle.
    recorded_us: NotRequired[int]
    #: `recorded_us`'s minute: the equality key mirrors refresh by (mirror.py).
    recorded_minute: NotRequired[int]


class SampleDoc(TypedDict):
    _id: str  # <tenant>/<storage>@<µs>
    tenant_id: str
    storage_id: str
    kind: str
    bytes_used: int
    at_us: int
    recorded_minute: NotRequired[int]  # see TransitionDoc


class HealthChangeDoc(TypedDict):
    _id: str  # <node>@<µs>:<health>
    node: str
    health: str
    at_us: int


class PriceDoc(TypedDict):
    _id: str  # <meter>:<spec or *>@<µs>
    meter: str  # gpu_hour | storage_gb_month
    spec_name: str | None
    amount: str  # an exact decimal
    effective_from: datetime
    effective_from_us: int


class BudgetFields(TypedDict):
    monthly_budget_cents: int
    thresholds: list[int]
    hard_stop: bool


class BudgetDoc(BudgetFields):
    _id: str  # the tenant


#: Who inside a tenant has a monthly spend limit of their own: a user (their limit) or
#: a project (its budget, decision 138).
Spender = Literal["user", "project"]


def spender_field(spender: Spender) -> Literal["user_id", "project"]:
    """The field of a stop notice that names the spender."""
    return "user_id" if spender == "user" else "project"


class SpendLimits(NamedTuple):
    """A tenant's users' monthly spend limits and its projects' monthly budgets, in
    cents, by user id and by project."""

    user: dict[str, int]
    project: dict[str, int]

    def of(self, spender: Spender) -> dict[str, int]:
        return self.user if spender == "user" else self.project


class NoticeDoc(TypedDict):
    """A budget threshold crossed, or a stop asked for: once per tenant and month."""

    #: <tenant>:<period>:<threshold or stop>, <tenant>:<period>:<user or
    #: project>:<id>:<limit>, or <tenant>:<period>:project:<id>:<budget>:<threshold>
    _id: str
    kind: str  # threshold | stop | user_stop | project_stop
    tenant_id: str
    period: str
    #: A user_stop's user, or a project_stop's (or a project threshold's) project,
    #: and its limit.
    user_id: NotRequired[str]
    project: NotRequired[str]
    limit_cents: NotRequired[int]
    threshold: NotRequired[int]
    spent_cents: NotRequired[int]
    budget_cents: NotRequired[int]
    reason: NotRequired[str]
    published: NotRequired[bool]  # set by the store when the notice is claimed


class UsageRecordDoc(TypedDict):
    _id: str  # <tenant>/<instance>#<opening sequence> or <tenant>/<storage>@<hour>
    tenant_id: str
    subject_id: str
    meter: str  # gpu_seconds | storage_gb_hours
    quantity: float
    credited_quantity: NotRequired[float]
    start_us: int
    end_us: int
    amount_cents: float
    published: NotRequired[bool]  # set by the store when the record is claimed


class InvoiceDoc(TypedDict):
    _id: str  # inv-<tenant>-<period>
    tenant_id: str
    period: str
    invoice: dict[str, Any]  # the issued Invoice, as it was served
