"""The operator's commands: `gpucloud fleet` and `gpucloud tenants` (platform admins)."""

from __future__ import annotations

import click

from .session import Column, Session, pass_session

NODE_COLUMNS: list[Column] = [
    ("NODE", lambda n: n["node"]),
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
    ("CREATED", lambda t: t["createdAt"][:19]),
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
