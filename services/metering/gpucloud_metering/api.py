"""HTTP routes of the metering service. Callers come through the gateway; reads are
scoped to the caller's tenant, and only a platform admin reads across tenants."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Response, status

from gpucloud_libs.errors import ValidationFailed
from gpucloud_libs.http import CurrentIdentity, app_part

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
from .service import MeteringService

router = APIRouter()

TenantFilter = Annotated[
    str | None, Query(alias="tenantID", max_length=64, description="Platform admins only")
]
Start = Annotated[datetime | None, Query(description="Default: the start of this month (UTC)")]
End = Annotated[datetime | None, Query(description="Default: now")]


MeteringServicePart = Annotated[MeteringService, app_part(MeteringService)]


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
async def add_price(
    body: PriceCreate, identity: CurrentIdentity, service: MeteringServicePart
) -> Price:
    identity.require_role("platform-admin")
    return await service.add_price(body)


@router.get("/prices", tags=["prices"], summary="Every price, with when it takes effect")
async def list_prices(identity: CurrentIdentity, service: MeteringServicePart) -> list[Price]:
    return await service.list_prices()


async def _tenant_report(
    identity: CurrentIdentity,
    service: MeteringServicePart,
    start: Start = None,
    end: End = None,
    group_by: Annotated[GroupBy, Query(alias="groupBy")] = "instance",
    tenant_id: TenantFilter = None,
) -> UsageReport:
    """The usage report both /usage routes serve, for the caller's scope."""
    return await service.report(service.scope(identity, tenant_id), *_range(start, end), group_by)


TenantReport = Annotated[UsageReport, Depends(_tenant_report)]


@router.get(
    "/usage",
    tags=["usage"],
    summary="Usage and cost over a time range, grouped (open intervals count up to now)",
)
async def usage(report: TenantReport) -> UsageReport:
    return report


@router.get(
    "/usage.csv",
    tags=["usage"],
    summary="The same report as CSV",
    response_class=Response,
    responses={200: {"content": {"text/csv": {}}}},
)
async def usage_csv(report: TenantReport, service: MeteringServicePart) -> Response:
    return Response(
        service.as_csv(report),
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
    service: MeteringServicePart,
    start: Start = None,
    end: End = None,
    group_by: Annotated[GroupBy, Query(alias="groupBy")] = "instance",
) -> UsageReport:
    tenant_id = identity.require_tenant()
    return await service.report(tenant_id, *_range(start, end), group_by, instance_id=instance_id)


@router.get(
    "/revenue",
    tags=["usage"],
    summary="Revenue across tenants, by zone or GPU type (platform admin)",
)
async def revenue(
    identity: CurrentIdentity,
    service: MeteringServicePart,
    start: Start = None,
    end: End = None,
    group_by: Annotated[GroupBy, Query(alias="groupBy")] = "gpu_type",
) -> UsageReport:
    identity.require_role("platform-admin")
    return await service.report(None, *_range(start, end), group_by)


@router.post(
    "/invoices",
    status_code=status.HTTP_201_CREATED,
    tags=["invoices"],
    summary="Issue a tenant's invoice for an ended month (platform admin); issued once",
    responses={200: {"description": "Already issued: the same invoice"}},
)
async def issue_invoice(
    body: InvoiceCreate, identity: CurrentIdentity, service: MeteringServicePart, response: Response
) -> Invoice:
    identity.require_role("platform-admin")
    invoice, created = await service.issue_invoice(body.tenant_id, body.period)
    if not created:
        response.status_code = status.HTTP_200_OK
    return invoice


@router.get("/invoices", tags=["invoices"], summary="Issued invoices")
async def list_invoices(
    identity: CurrentIdentity, service: MeteringServicePart, tenant_id: TenantFilter = None
) -> list[Invoice]:
    return await service.list_invoices(service.scope(identity, tenant_id))


@router.get("/invoices/{invoice_id}", tags=["invoices"], summary="One issued invoice")
async def get_invoice(
    invoice_id: str, identity: CurrentIdentity, service: MeteringServicePart
) -> Invoice:
    return await service.get_invoice(service.scope(identity, None), invoice_id)


@router.get(
    "/invoice-drafts/{period}",
    tags=["invoices"],
    summary="What a month's invoice says so far (not issued)",
)
async def draft_invoice(
    period: Period,
    identity: CurrentIdentity,
    service: MeteringServicePart,
    tenant_id: TenantFilter = None,
) -> Invoice:
    scope = service.scope(identity, tenant_id)
    if scope is None:
        raise ValidationFailed("name the tenant: tenantID")
    return await service.draft_invoice(scope, period)


@router.put("/budget", tags=["budgets"], summary="Set your tenant's monthly budget and alerts")
async def set_budget(
    body: BudgetSet, identity: CurrentIdentity, service: MeteringServicePart
) -> Budget:
    identity.require_role("tenant-admin")
    return await service.set_budget(identity.require_tenant(), body)


@router.get("/budget", tags=["budgets"], summary="Your tenant's budget and this month's spend")
async def get_budget(identity: CurrentIdentity, service: MeteringServicePart) -> Budget:
    identity.require_role("tenant-admin")
    return await service.get_budget(identity.require_tenant())
