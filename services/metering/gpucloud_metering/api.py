"""HTTP routes of the metering service. Callers come through the gateway; reads are
scoped to the caller's tenant, and only a platform admin reads across tenants."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Response, status

from gpucloud_libs.errors import ValidationFailed
from gpucloud_libs.http import CurrentIdentity, app_part
from gpucloud_libs.naming import PROJECT_ID_PATTERN

from .budgets import Budgets
from .invoices import Invoices
from .prices import Prices
from .reports import Reports, as_csv, scope
from .schemas import (
    Budget,
    BudgetSet,
    GroupBy,
    Invoice,
    InvoiceCreate,
    Period,
    Price,
    PriceCreate,
    UsageReport,
)

router = APIRouter()

TenantFilter = Annotated[
    str | None, Query(alias="tenantID", max_length=64, description="Platform admins only")
]
Start = Annotated[datetime | None, Query(description="Default: the start of this month (UTC)")]
End = Annotated[datetime | None, Query(description="Default: now")]
ProjectFilter = Annotated[
    str | None,
    Query(pattern=PROJECT_ID_PATTERN, description="One project's workloads (GPU time alone: storage is the tenant's)"),
]  # fmt: skip


PricesPart = Annotated[Prices, app_part(Prices)]
ReportsPart = Annotated[Reports, app_part(Reports)]
InvoicesPart = Annotated[Invoices, app_part(Invoices)]
BudgetsPart = Annotated[Budgets, app_part(Budgets)]


def _range(start: datetime | None, end: datetime | None) -> tuple[datetime, datetime]:
    now = datetime.now(UTC)
    end = end or now
    start = start or datetime(now.year, now.month, 1, tzinfo=UTC)
    if start.tzinfo is None or end.tzinfo is None:
        raise ValidationFailed("`start` and `end` need a time zone, e.g. 2026-11-01T00:00:00Z")
    return start, end


@router.post(
    "/prices",
    status_code=status.HTTP_201_CREATED,
    tags=["prices"],
    summary="Set a price from a moment on (platform admin)",
)
async def add_price(body: PriceCreate, identity: CurrentIdentity, prices: PricesPart) -> Price:
    identity.require_role("platform-admin")
    return await prices.add(body)


@router.delete(
    "/prices/{price_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    tags=["prices"],
    summary="Withdraw a price that has not taken effect yet (platform admin)",
)
async def remove_price(price_id: str, identity: CurrentIdentity, prices: PricesPart) -> None:
    identity.require_role("platform-admin")
    await prices.remove(price_id)


@router.get("/prices", tags=["prices"], summary="Every price, with when it takes effect")
async def list_prices(identity: CurrentIdentity, prices: PricesPart) -> list[Price]:
    return await prices.list()


async def _tenant_report(
    identity: CurrentIdentity,
    reports: ReportsPart,
    start: Start = None,
    end: End = None,
    group_by: Annotated[GroupBy, Query(alias="groupBy")] = "instance",
    tenant_id: TenantFilter = None,
    project: ProjectFilter = None,
) -> UsageReport:
    """The usage report both /usage routes serve, for the caller's scope."""
    return await reports.report(
        scope(identity, tenant_id), *_range(start, end), group_by, project=project,
        seen=identity.projects,
    )  # fmt: skip


TenantReport = Annotated[UsageReport, Depends(_tenant_report)]


@router.get(
    "/usage",
    tags=["usage"],
    summary="Usage and cost over a time range, grouped (open intervals count up to now)",
)
async def usage(report: TenantReport) -> UsageReport:
    return report


@router.get(
    "/usage/mine",
    tags=["usage"],
    summary="The caller's own usage and cost: the GPU time of the workloads they started",
)
async def my_usage(
    identity: CurrentIdentity,
    reports: ReportsPart,
    start: Start = None,
    end: End = None,
    group_by: Annotated[GroupBy, Query(alias="groupBy")] = "instance",
) -> UsageReport:
    tenant_id = identity.require_tenant()
    return await reports.report(
        tenant_id, *_range(start, end), group_by, user_id=identity.subject, seen=identity.projects
    )


@router.get(
    "/usage.csv",
    tags=["usage"],
    summary="The same report as CSV",
    response_class=Response,
    responses={200: {"content": {"text/csv": {}}}},
)
async def usage_csv(report: TenantReport) -> Response:
    return Response(
        as_csv(report),
        media_type="text/csv",
        headers={"Content-Disposition": 'attachment; filename="usage.csv"'},
    )


@router.get(
    "/usage/instances/{instance_id}",
    tags=["usage"],
    summary="One instance's usage and cost so far (live while it runs)",
)
async def instance_usage(
    instance_id: str,
    identity: CurrentIdentity,
    reports: ReportsPart,
    start: Start = None,
    end: End = None,
    group_by: Annotated[GroupBy, Query(alias="groupBy")] = "instance",
) -> UsageReport:
    tenant_id = identity.require_tenant()
    return await reports.report(
        tenant_id, *_range(start, end), group_by, instance_id=instance_id, seen=identity.projects
    )


@router.get(
    "/usage/jobs/{job_id}",
    tags=["usage"],
    summary="One batch job's usage and cost so far: every run's GPU time (live while it runs)",
)
async def job_usage(
    job_id: str,
    identity: CurrentIdentity,
    reports: ReportsPart,
    start: Start = None,
    end: End = None,
    group_by: Annotated[GroupBy, Query(alias="groupBy")] = "job",
) -> UsageReport:
    tenant_id = identity.require_tenant()
    return await reports.report(
        tenant_id, *_range(start, end), group_by, job_id=job_id, seen=identity.projects
    )


@router.get(
    "/usage/inference-services/{service_id}",
    tags=["usage"],
    summary="One inference service's usage and cost so far: every replica's GPU time",
)
async def service_usage(
    service_id: str,
    identity: CurrentIdentity,
    reports: ReportsPart,
    start: Start = None,
    end: End = None,
    group_by: Annotated[GroupBy, Query(alias="groupBy")] = "service",
) -> UsageReport:
    tenant_id = identity.require_tenant()
    return await reports.report(
        tenant_id, *_range(start, end), group_by, service_id=service_id, seen=identity.projects
    )


@router.get(
    "/revenue",
    tags=["usage"],
    summary="Revenue across tenants, by GPU type, zone, cluster or region (platform admin)",
)
async def revenue(
    identity: CurrentIdentity,
    reports: ReportsPart,
    start: Start = None,
    end: End = None,
    group_by: Annotated[GroupBy, Query(alias="groupBy")] = "gpu_type",
) -> UsageReport:
    identity.require_role("platform-admin")
    return await reports.report(None, *_range(start, end), group_by)


@router.post(
    "/invoices",
    status_code=status.HTTP_201_CREATED,
    tags=["invoices"],
    summary="Issue a tenant's invoice for an ended month (platform admin); issued once",
    responses={200: {"description": "Already issued: the same invoice"}},
)
async def issue_invoice(
    body: InvoiceCreate, identity: CurrentIdentity, invoices: InvoicesPart, response: Response
) -> Invoice:
    identity.require_role("platform-admin")
    invoice, created = await invoices.issue(body.tenant_id, body.period)
    if not created:
        response.status_code = status.HTTP_200_OK
    return invoice


@router.get("/invoices", tags=["invoices"], summary="Issued invoices")
async def list_invoices(
    identity: CurrentIdentity, invoices: InvoicesPart, tenant_id: TenantFilter = None
) -> list[Invoice]:
    return await invoices.list(scope(identity, tenant_id))


@router.get("/invoices/{invoice_id}", tags=["invoices"], summary="One issued invoice")
async def get_invoice(
    invoice_id: str, identity: CurrentIdentity, invoices: InvoicesPart
) -> Invoice:
    return await invoices.get(scope(identity, None), invoice_id)


@router.get(
    "/invoice-drafts/{period}",
    tags=["invoices"],
    summary="What a month's invoice says so far (not issued)",
)
async def draft_invoice(
    period: Period,
    identity: CurrentIdentity,
    invoices: InvoicesPart,
    tenant_id: TenantFilter = None,
) -> Invoice:
    tenant = scope(identity, tenant_id)
    if tenant is None:
        raise ValidationFailed("name the tenant: tenantID")
    return await invoices.draft(tenant, period)


@router.put("/budget", tags=["budgets"], summary="Set your tenant's monthly budget and alerts")
async def set_budget(body: BudgetSet, identity: CurrentIdentity, budgets: BudgetsPart) -> Budget:
    identity.require_role("tenant-admin")
    return await budgets.set(identity.require_tenant(), body)


@router.get("/budget", tags=["budgets"], summary="Your tenant's budget and this month's spend")
async def get_budget(identity: CurrentIdentity, budgets: BudgetsPart) -> Budget:
    identity.require_role("tenant-admin")
    return await budgets.get(identity.require_tenant())
