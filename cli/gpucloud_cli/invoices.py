"""`gpucloud invoices`: the tenant's invoices and what this month's says so far, line
by line (each GPU line names its project, decision 138)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import click

from .session import Column, Session, moment, pass_session

INVOICE_COLUMNS: list[Column] = [
    ("ID", lambda i: i["invoiceID"]),
    ("PERIOD", lambda i: i["period"]),
    ("STATUS", lambda i: i["status"]),
    ("TOTAL (USD)", lambda i: _usd_cents(i["totalCents"])),
    ("ISSUED", lambda i: moment(i["issuedAt"])),
]
LINE_COLUMNS: list[Column] = [
    ("PROJECT", lambda line: line.get("project") or "-"),
    ("DESCRIPTION", lambda line: line["description"]),
    ("QUANTITY", lambda line: f"{Decimal(str(line['quantity'])):.4f}"),
    ("CREDITED", lambda line: f"{Decimal(str(line['creditedQuantity'])):.4f}"),
    ("UNIT PRICE (USD)", lambda line: _usd(line["unitPrice"])),
    ("AMOUNT (USD)", lambda line: _usd_cents(line["amountCents"])),
]


def _usd(amount: Any) -> str:
    return "-" if amount is None else f"${Decimal(str(amount)):,.2f}"


def _usd_cents(cents: int) -> str:
    return f"${Decimal(cents) / 100:,.2f}"


@click.group()
def invoices() -> None:
    """Invoices: one a month, each GPU line by project, spec and price (tenant admin)."""


@invoices.command("ls")
@click.option("--tenant", help="This tenant's (platform admin; default: every tenant's).")
@pass_session
def list_invoices(session: Session, tenant: str | None) -> None:
    """The invoices issued, newest first."""
    session.emit(session.client.list_invoices(tenant=tenant), INVOICE_COLUMNS)


@invoices.command("show")
@click.argument("which", required=False)
@click.option("--tenant", help="The tenant of a draft (platform admin).")
@pass_session
def show_invoice(session: Session, which: str | None, tenant: str | None) -> None:
    """One invoice's lines: WHICH is an issued invoice's ID, or a month (YYYY-MM) for
    what its invoice says so far (default: this month's, a draft).

    \b
    Examples:
      gpucloud invoices show
      gpucloud invoices show 2026-10
      gpucloud invoices show inv-acme-2026-10
    """
    if which is None or _is_month(which):
        invoice = session.client.draft_invoice(which, tenant=tenant)
    else:
        invoice = session.client.get_invoice(which)
    if session.output == "json":
        session.emit_json(invoice)
        return
    title = (
        f"{invoice['tenantID']} {invoice['period']} ({invoice['status']}), "
        f"total {_usd_cents(invoice['totalCents'])}"
    )
    session.emit(invoice["lines"], LINE_COLUMNS, title=title)


def _is_month(text: str) -> bool:
    year, dash, month = text.partition("-")
    return bool(dash) and len(year) == 4 and len(month) == 2 and (year + month).isdigit()
