"""The operator's commands (platform admins): `gpucloud fleet`, `gpucloud tenants`,
`gpucloud specs` and `gpucloud prices`."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import click

from .session import Column, Session, moment, pass_session

NODE_COLUMNS: list[Column] = [
    ("NODE", lambda n: n["node"]),
    ("CLUSTER", lambda n: n.get("cluster")),
    ("ZONE", lambda n: n["zone"]),
    ("GPU", lambda n: n["gpuType"]),
    ("IN USE", lambda n: f"{n['gpusInUse']}/{n['gpus']}"),
    ("HEALTH", lambda n: n["health"]),
    ("REASONS", lambda n: n["healthReasons"]),
    (
        "UTIL %",
        lambda n: None if n["utilizationGpuPct"] is None else f"{n['utilizationGpuPct']:.0f}",
    ),
    ("TELEMETRY", lambda n: n["telemetry"]),
]


@click.group()
def fleet() -> None:
    """The GPU fleet: nodes, their health and use (platform admin)."""


@fleet.command("ls")
@click.option("--health", help="Only nodes in this health (healthy, degraded, quarantined).")
@pass_session
def list_nodes(session: Session, health: str | None) -> None:
    """List the fleet's nodes."""
    nodes = [n for n in session.client.list_nodes() if health is None or n["health"] == health]
    session.emit(nodes, NODE_COLUMNS)


@fleet.command("release")
@click.argument("node")
@pass_session
def release_node(session: Session, node: str) -> None:
    """Return a degraded or quarantined node to service."""
    session.emit(session.client.release_node(node), NODE_COLUMNS)


@fleet.command("quarantine")
@click.argument("node")
@click.option("--reason", required=True, help="Why: kept in the node's health reasons.")
@pass_session
def quarantine_node(session: Session, node: str, reason: str) -> None:
    """Take a node out of service until it is released.

    \b
    Example:
      gpucloud fleet quarantine h100-zone-a-0 --reason "fan replacement"
    """
    session.emit(session.client.quarantine_node(node, reason), NODE_COLUMNS)


@click.group()
def tenants() -> None:
    """Tenants, their quotas and status (platform admin)."""


TENANT_COLUMNS: list[Column] = [
    ("ID", lambda t: t["tenantID"]),
    ("NAME", lambda t: t["name"]),
    ("STATUS", lambda t: t["status"]),
    ("MAX GPUS", lambda t: t["quota"].get("maxGpus")),
    ("MAY BORROW", lambda t: t["limits"].get("borrowGpus", 0)),
    ("MAX INSTANCES", lambda t: t["quota"].get("maxInstances")),
    ("CREATED", lambda t: moment(t["createdAt"])),
]


@tenants.command("ls")
@pass_session
def list_tenants(session: Session) -> None:
    """List tenants."""
    session.emit(session.client.list_tenants(), TENANT_COLUMNS)


@tenants.command("get")
@click.argument("tenant_id")
@pass_session
def get_tenant(session: Session, tenant_id: str) -> None:
    """One tenant."""
    session.emit(session.client.get_tenant(tenant_id), TENANT_COLUMNS)


@tenants.command("create")
@click.argument("tenant_id")
@click.option("--name", required=True, help="The customer's name.")
@click.option("--max-gpus", type=click.IntRange(min=0), required=True)
@click.option("--max-instances", type=click.IntRange(min=0), required=True)
@click.option("--storage-gib", type=click.IntRange(min=0), default=1024, show_default=True)
@click.option("--admin-email", required=True, help="The tenant's first admin.")
@click.option("--admin-name", required=True)
@pass_session
def create_tenant(
    session: Session, tenant_id: str, name: str, max_gpus: int, max_instances: int,
    storage_gib: int, admin_email: str, admin_name: str,
) -> None:  # fmt: skip
    """Onboard a customer: the tenant, its limits and its first admin, whose API key is
    printed this once, to hand over (`gpucloud login --api-key-stdin`)."""
    created = session.client.create_tenant({
        "tenantID": tenant_id, "name": name,
        "limits": {"maxGpus": max_gpus, "maxInstances": max_instances,
                   "maxStorageBytes": storage_gib * 1024**3},
        "admin": {"email": admin_email, "name": admin_name, "role": "tenant-admin"},
    })  # fmt: skip
    if session.output == "json":
        session.emit_json(created)
        return
    session.emit(created["tenant"], TENANT_COLUMNS)
    session.note(f"API key of {admin_email}, shown this once:")
    click.echo(created["adminKey"]["secret"])


@click.group()
def specs() -> None:
    """Specs: the GPU type and count, CPU and memory tenants start on (platform admin)."""


SPEC_COLUMNS: list[Column] = [
    ("SPEC", lambda s: s["name"]),
    ("GPUS", lambda s: f"{s['gpuNum']} x {s['gpuType']}"),
    ("CPU", lambda s: s["cpu"]),
    ("MEMORY", lambda s: s["memory"]),
]


@specs.command("ls")
@pass_session
def list_specs(session: Session) -> None:
    """List specs."""
    session.emit(session.client.list_specs(), SPEC_COLUMNS)


@specs.command("create")
@click.argument("name")
@click.option("--gpu-type", required=True, help="GPU feature discovery's product name.")
@click.option("--gpus", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--cpu", default="8", show_default=True)
@click.option("--memory", default="64Gi", show_default=True)
@pass_session
def create_spec(
    session: Session, name: str, gpu_type: str, gpus: int, cpu: str, memory: str
) -> None:
    """Offer a new spec."""
    body = {"name": name, "gpuType": gpu_type, "gpuNum": gpus, "cpu": cpu, "memory": memory}
    session.emit(session.client.create_spec(body), SPEC_COLUMNS)


@specs.command("delete")
@click.argument("name")
@click.confirmation_option(prompt="New starts on this spec will be refused. Delete it?")
@pass_session
def delete_spec(session: Session, name: str) -> None:
    """Withdraw a spec: new starts are refused, running ones go on."""
    session.client.delete_spec(name)
    session.note(f"spec {name} deleted")


@click.group()
def prices() -> None:
    """Prices per GPU-hour of a spec, or per GB-month of storage (platform admin)."""


PRICE_COLUMNS: list[Column] = [
    ("ID", lambda p: p["priceID"]),
    ("METER", lambda p: p["meter"]),
    ("SPEC", lambda p: p.get("specName")),
    ("USD", lambda p: p["amount"]),
    ("FROM", lambda p: moment(p["effectiveFrom"])),
]


@prices.command("ls")
@pass_session
def list_prices(session: Session) -> None:
    """Every price, with when it takes effect."""
    session.emit(session.client.list_prices(), PRICE_COLUMNS)


@prices.command("set")
@click.argument("amount")
@click.option("--spec", "spec_name", help="The spec priced per GPU-hour.")
@click.option("--storage", is_flag=True, help="Price storage per GB-month instead.")
@click.option(
    "--from", "effective_from", type=click.DateTime(["%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%d"]),
    help="When it takes effect: 2027-01-01 (UTC midnight) or 2027-01-01T09:00:00+02:00; "
    "default now.",
)  # fmt: skip
@pass_session
def set_price(
    session: Session,
    amount: str,
    spec_name: str | None,
    storage: bool,
    effective_from: datetime | None,
) -> None:
    """Set a price in USD (decimals, e.g. 2.50), in force from now or `--from`."""
    if bool(spec_name) == storage:
        raise click.UsageError("give --spec NAME or --storage")
    body: dict[str, Any] = (
        {"meter": "gpu_hour", "specName": spec_name, "amount": amount}
        if spec_name
        else {"meter": "storage_gb_month", "amount": amount}
    )
    if effective_from is not None:
        moment_given = (
            effective_from if effective_from.tzinfo else effective_from.replace(tzinfo=UTC)
        )
        body["effectiveFrom"] = moment_given.isoformat()
    session.emit(session.client.set_price(body), PRICE_COLUMNS)


@prices.command("rm")
@click.argument("price_id")
@click.option("--yes", is_flag=True, help="Do not ask first.")
@pass_session
def withdraw_price(session: Session, price_id: str, yes: bool) -> None:
    """Withdraw a price that has not taken effect yet; one in effect stays (it priced
    used time): set a new one to replace it."""
    if not yes:
        click.confirm(f"Withdraw price {price_id}?", abort=True)
    session.client.withdraw_price(price_id)
    session.note(f"price {price_id} withdrawn")
