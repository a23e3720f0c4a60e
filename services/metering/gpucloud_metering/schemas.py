"""Request and response models of the metering API. Money is a decimal string in
the platform's currency (exact), or integer cents where it is rounded."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Annotated, Literal

from pydantic import AwareDatetime, Field, field_validator

from gpucloud_libs.http import ApiModel

Period = Annotated[str, Field(pattern=r"^20[0-9]{2}-(0[1-9]|1[0-2])$", description="YYYY-MM, UTC")]
#: `job` puts each job's runs in one row, and every instance in the row `-`.
GroupBy = Literal[
    "instance",
    "spec",
    "user",
    "project",
    "day",
    "gpu_type",
    "zone",
    "cluster",
    "region",
    "job",
    "service",
]
Money = Annotated[Decimal, Field(ge=0, le=Decimal("1000000"), max_digits=16, decimal_places=6)]


class PriceCreate(ApiModel):
    meter: Literal["gpu_hour", "storage_gb_month"]
    #: For `gpu_hour`: the spec priced. Unset for storage.
    spec_name: str | None = Field(default=None, max_length=40)
    #: Per GPU-hour, or per GB-month of storage.
    amount: Money
    #: Defaults to now; never in the past, so a change never re-prices used time.
    effective_from: AwareDatetime | None = None


class Price(ApiModel):
    #: Names the price for its removal while it is still to come.
    price_id: str = Field(alias="priceID")
    meter: Literal["gpu_hour", "storage_gb_month"]
    spec_name: str | None
    amount: Decimal
    effective_from: datetime


class UsageRow(ApiModel):
    #: The group's value: an instance id, spec, user, day (YYYY-MM-DD), GPU type, zone, cluster or region.
    key: str
    #: Billed GPU time. A shared GPU's unit counts at its weight (a 1g MIG slice a
    #: seventh, a replica of a GPU time-sliced four ways a quarter), rounded down to
    #: the microsecond once per row.
    gpu_microseconds: int
    gpu_seconds: float
    #: GPU time on nodes quarantined for a hardware fault: not billed, not in the above.
    credited_gpu_microseconds: int = 0
    #: Time held on shared-GPU units (MIG slices, time-sliced replicas), unweighted:
    #: their price is per unit-hour, so this is what it multiplies.
    slice_microseconds: int = 0
    storage_gb_hours: Decimal
    #: Exact, before rounding.
    amount: Decimal


class UsageReport(ApiModel):
    tenant_id: str | None = Field(alias="tenantID")
    start: datetime
    end: datetime
    group_by: GroupBy
    rows: list[UsageRow]
    total: UsageRow
    #: Open intervals (running instances) are counted up to this moment.
    as_of: datetime


class InvoiceLine(ApiModel):
    description: str
    meter: Literal["gpu_hour", "storage_gb_month"]
    spec_name: str | None = None
    #: The tenant's project the GPU-hours were spent in (decision 138); None for
    #: storage, which belongs to the tenant.
    project: str | None = None
    #: GPU-hours or GB-months billed.
    quantity: Decimal
    #: GPU-hours at this price on nodes quarantined for a hardware fault: not billed.
    credited_quantity: Decimal = Decimal(0)
    unit_price: Decimal | None
    amount_cents: int


class Invoice(ApiModel):
    invoice_id: str = Field(alias="invoiceID")
    tenant_id: str = Field(alias="tenantID")
    period: str
    lines: list[InvoiceLine]
    total_cents: int
    issued_at: datetime | None = None
    status: Literal["draft", "issued"]


class InvoiceCreate(ApiModel):
    tenant_id: str = Field(alias="tenantID", max_length=64)
    period: Period


class BudgetSet(ApiModel):
    monthly_budget_cents: int = Field(ge=1, le=10**13)
    #: Percentages of the budget that raise a billing alert, once each per month.
    thresholds: list[int] = Field(
        default_factory=lambda: [50, 80, 100], min_length=1, max_length=10
    )
    #: At 100%, ask the instances service to stop the tenant's instances.
    hard_stop: bool = False

    @field_validator("thresholds")
    @classmethod
    def _distinct_percentages(cls, thresholds: list[int]) -> list[int]:
        if len(set(thresholds)) != len(thresholds) or not all(0 < t <= 1000 for t in thresholds):
            raise ValueError("thresholds are distinct percentages from 1 to 1000")
        return sorted(thresholds)


class Budget(BudgetSet):
    tenant_id: str = Field(alias="tenantID")
    period: str
    spent_cents: int
    crossed: list[int]
