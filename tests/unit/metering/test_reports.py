"""What a usage report covers and how it reads (gpucloud_metering.reports), and what
the metering API takes and shows of prices and invoices (schemas, prices.price_view):
a tenant admin sees its own tenant alone, the CSV carries every row and the total,
money is exact, and a price is never vaguer than six decimals or in no time zone."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from pydantic import ValidationError

from gpucloud_libs.errors import Forbidden
from gpucloud_libs.identity import Identity, Role
from gpucloud_metering import ledger
from gpucloud_metering.documents import PriceDoc
from gpucloud_metering.prices import price_view
from gpucloud_metering.reports import as_csv, scope
from gpucloud_metering.schemas import InvoiceCreate, PriceCreate, UsageReport, UsageRow

AT = datetime(2026, 3, 1, tzinfo=UTC)


def caller(role: Role, tenant_id: str | None = "t-1") -> Identity:
    return Identity(subject="u-1", role=role, tenant_id=tenant_id, expires_at=0)


def row(key: str, gpu_us: int, amount: str, **extra: int) -> UsageRow:
    return UsageRow(
        key=key, gpu_microseconds=gpu_us, gpu_seconds=gpu_us / 1e6,
        storage_gb_hours=Decimal("0.5"), amount=Decimal(amount), **extra,
    )  # fmt: skip


# --- who a report covers ---------------------------------------------------------


def test_a_platform_admin_reads_the_tenant_it_names_or_all_of_them() -> None:
    admin = caller("platform-admin", None)
    assert scope(admin, "t-9") == "t-9"
    assert scope(admin, None) is None


def test_a_tenant_admin_reads_its_own_tenant_whatever_tenant_it_names() -> None:
    assert scope(caller("tenant-admin"), None) == "t-1"
    assert scope(caller("tenant-admin"), "t-2") == "t-1"


def test_a_tenant_user_reads_no_usage_or_billing() -> None:
    with pytest.raises(Forbidden, match="tenant admins"):
        scope(caller("tenant-user"), "t-1")


def test_a_tenant_admin_without_a_tenant_is_refused() -> None:
    with pytest.raises(Forbidden):
        scope(caller("tenant-admin", None), None)


# --- the CSV ---------------------------------------------------------------------


def report(rows: list[UsageRow], total: UsageRow) -> UsageReport:
    return UsageReport(
        tenant_id="t-1", start=AT, end=AT, group_by="spec", rows=rows, total=total, as_of=AT
    )


def test_the_csv_has_a_header_each_row_in_order_and_the_total_last() -> None:
    rows = [
        row("a100x8", 1_500_000, "1.25"),
        row("h100x1", 3_600_000_000, "2.50", credited_gpu_microseconds=7),
    ]
    lines = list(csv.reader(io.StringIO(as_csv(report(rows, row("total", 3_601_500_000, "3.75"))))))
    assert lines == [
        ["spec", "gpu_seconds", "gpu_microseconds", "credited_gpu_microseconds",
         "storage_gb_hours", "amount"],
        ["a100x8", "1.500000", "1500000", "0", "0.5", "1.25"],
        ["h100x1", "3600.000000", "3600000000", "7", "0.5", "2.50"],
        ["total", "3601.500000", "3601500000", "0", "0.5", "3.75"],
    ]  # fmt: skip


def test_csv_seconds_are_exact_to_the_microsecond_and_money_is_not_rounded() -> None:
    lines = list(csv.reader(io.StringIO(as_csv(report([], row("total", 1, "0.000000001"))))))
    assert lines[-1][1:3] == ["0.000001", "1"]
    assert Decimal(lines[-1][5]) == Decimal("0.000000001")


def test_a_report_with_no_usage_is_a_header_and_a_zero_total() -> None:
    lines = as_csv(report([], row("total", 0, "0"))).splitlines()
    assert len(lines) == 2
    assert lines[1] == "total,0.000000,0,0,0.5,0"


def test_a_key_with_a_comma_stays_one_field() -> None:
    lines = list(
        csv.reader(io.StringIO(as_csv(report([row("a,b", 0, "0")], row("total", 0, "0")))))
    )
    assert lines[1][0] == "a,b"


# --- prices ----------------------------------------------------------------------


def test_a_stored_price_is_shown_with_its_id_moment_and_exact_amount() -> None:
    at_us = ledger.to_us(AT) + 1
    doc: PriceDoc = {
        "_id": f"gpu_hour:h100x1@{at_us}", "meter": "gpu_hour", "spec_name": "h100x1",
        "amount": "2.345678", "effective_from": AT, "effective_from_us": at_us,
    }  # fmt: skip
    view = price_view(doc)
    assert (view.price_id, view.meter, view.spec_name) == (doc["_id"], "gpu_hour", "h100x1")
    assert view.amount == Decimal("2.345678")
    # The moment is read from the exact µs, not from the stored (millisecond) datetime.
    assert view.effective_from == datetime(2026, 3, 1, 0, 0, 0, 1, tzinfo=UTC)
    body = view.model_dump(mode="json", by_alias=True)
    assert body["priceID"] == doc["_id"]
    assert body["specName"] == "h100x1"


def test_a_price_takes_up_to_six_decimals_and_up_to_a_million() -> None:
    body = {"meter": "gpu_hour", "specName": "h100x1", "amount": "1000000"}
    assert PriceCreate.model_validate(body).amount == Decimal(1_000_000)
    assert PriceCreate.model_validate(body | {"amount": "0.000001"}).amount == Decimal("0.000001")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("amount", "1.1234567"),
        ("amount", "1000000.01"),
        ("amount", "-0.01"),
        ("meter", "cpu_hour"),
        ("specName", "x" * 41),
        ("effectiveFrom", "2026-01-01T00:00:00"),  # no time zone
        ("currency", "EUR"),  # unknown field
    ],
)
def test_a_price_outside_the_contract_is_refused(field: str, value: str) -> None:
    body = {"meter": "gpu_hour", "specName": "h100x1", "amount": "2.50", field: value}
    with pytest.raises(ValidationError):
        PriceCreate.model_validate(body)


def test_a_price_without_a_moment_takes_effect_when_it_is_added() -> None:
    body = PriceCreate.model_validate({"meter": "storage_gb_month", "amount": "0.10"})
    assert (body.spec_name, body.effective_from) == (None, None)


# --- invoice periods -------------------------------------------------------------


@pytest.mark.parametrize("period", ["2026-01", "2026-12", "2099-06", "2000-01"])
def test_an_invoice_is_for_a_month_of_this_century(period: str) -> None:
    assert InvoiceCreate.model_validate({"tenantID": "t-1", "period": period}).period == period


@pytest.mark.parametrize("period", ["2026-00", "2026-13", "2026-1", "1999-12", "2026/01", "26-01"])
def test_an_invoice_period_that_is_no_month_is_refused(period: str) -> None:
    with pytest.raises(ValidationError):
        InvoiceCreate.model_validate({"tenantID": "t-1", "period": period})
