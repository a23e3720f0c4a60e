"""`gpucloud usage`, `gpucloud revenue` and `gpucloud alerts`: what the tenant spent,
what the fleet earned, and what is on fire."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import click

from gpucloud_client.models import Identity

from .session import Column, Session, moment, pass_session

GROUPS = [
    "instance", "job", "spec", "user", "project", "day", "gpu_type", "zone", "cluster", "region",
]  # fmt: skip
REVENUE_GROUPS = ["gpu_type", "zone", "cluster", "region", "spec", "day"]


@click.command()
@click.option("--group-by", type=click.Choice(GROUPS), default="instance", show_default=True)
@click.option("--start", help="ISO 8601 start (default: the start of this month, UTC).")
@click.option("--end", help="ISO 8601 end (default: now).")
@click.option(
    "--mine", is_flag=True, help="Only what you started (a tenant user sees nothing else)."
)
@click.option("--project", help="Only one project's GPU time (storage is the tenant's).")
@pass_session
def usage(
    session: Session, group_by: str, start: str | None, end: str | None, mine: bool,
    project: str | None,
) -> None:  # fmt: skip
    """GPU time and cost over a period, grouped; running work counts up to now. Amounts
    are in USD, times in UTC."""
    me = session.client.whoami()
    mine = mine or me["role"] == "tenant-user"
    if mine and project:
        raise click.UsageError("--project reads the tenant's usage; it goes without --mine")
    report = session.client.usage(
        group_by=group_by, start=start, end=end, mine=mine, project=project
    )
    if session.output == "json":
        session.emit_json(report)
        return
    names = user_names(session, me) if group_by == "user" else {}
    whose = "your own usage, " if mine else (f"project {project}, " if project else "")
    _emit_report(session, report, group_by, names, whose)


@click.command()
@click.option(
    "--group-by", type=click.Choice(REVENUE_GROUPS), default="gpu_type", show_default=True
)
@click.option("--start", help="ISO 8601 start (default: the start of this month, UTC).")
@click.option("--end", help="ISO 8601 end (default: now).")
@pass_session
def revenue(session: Session, group_by: str, start: str | None, end: str | None) -> None:
    """Revenue across tenants over a period, grouped by GPU type, zone, cluster, region,
    spec or day (platform admin). Amounts in USD, times in UTC."""
    report = session.client.revenue(group_by=group_by, start=start, end=end)
    if session.output == "json":
        session.emit_json(report)
        return
    _emit_report(session, report, group_by, {}, "revenue, ")


def _emit_report(
    session: Session, report: Any, group_by: str, names: dict[str, str], whose: str
) -> None:
    columns: list[Column] = [
        (group_by.upper(), lambda r: names.get(r["key"], r["key"])),
        ("GPU-HOURS", lambda r: f"{r['gpuMicroseconds'] / 3.6e9:.4f}"),
        ("STORAGE GB-H", lambda r: f"{float(r['storageGbHours']):.4f}"),
        ("AMOUNT (USD)", lambda r: f"${Decimal(str(r['amount'])):,.2f}"),
    ]
    session.emit([*report["rows"], {**report["total"], "key": "TOTAL"}], columns,
                 title=f"{whose}{report['start'][:19]}Z → {report['asOf'][:19]}Z")  # fmt: skip


def user_names(session: Session, me: Identity) -> dict[str, str]:
    """How a user row is shown: `Name <email>` from the tenant's users for an admin; a
    tenant user, who reads only their own rows and not the user list, is "you"."""
    if me["role"] == "tenant-user":
        return {me["userID"]: "you"} if me["userID"] else {}
    return {
        user["userID"]: f"{user['name']} <{user['email']}>" for user in session.client.list_users()
    }


@click.group()
def alerts() -> None:
    """Alerts raised by the tenant's (or, for the operator, the fleet's) alert rules."""


@alerts.command("ls")
@click.option("--state", type=click.Choice(["firing", "resolved"]), help="Only this state.")
@click.option("--rule", help="Only this rule's alerts.")
@pass_session
def list_alerts(session: Session, state: str | None, rule: str | None) -> None:
    """List alerts, newest first."""
    session.emit(session.client.list_alerts(state=state, rule=rule), [
        ("ID", lambda a: a["alertID"]), ("STATE", lambda a: a["state"]),
        ("SEVERITY", lambda a: a["severity"]), ("METRIC", lambda a: a["metric"]),
        ("VALUE", lambda a: f"{a['value']} {a['comparison']} {a['threshold']}"),
        ("NODE", lambda a: a["node"]), ("INSTANCE", lambda a: a["instanceID"]),
        ("FIRED", lambda a: moment(a["firedAt"])),
    ])  # fmt: skip
