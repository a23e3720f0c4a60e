"""`gpucloud offer` and `gpucloud templates`: what can be rented, and what to run on it,
before anything is launched."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import click

from .session import Column, Session, pass_session

TEMPLATE_COLUMNS: list[Column] = [
    ("TEMPLATE", lambda t: t["templateID"]),
    ("NAME", lambda t: t["name"]),
    ("FOR", lambda t: ", ".join(t["kinds"])),
    ("IMAGE", lambda t: t["image"]),
    ("PORTS", lambda t: ", ".join(f"{p['port']}/{p['appProtocol']}" for p in t["ports"])),
]
OFFER_COLUMNS: list[Column] = [
    ("SPEC", lambda o: o["specName"]),
    ("GPUS", lambda o: f"{o['gpuNum']} x {o['gpuType']}"),
    ("CPU", lambda o: o["cpu"]),
    ("MEMORY", lambda o: o["memory"]),
    ("PRICE", lambda o: o["pricePerHour"]),
    ("FREE NOW", lambda o: _free(o["freeNow"])),
]


def offers(
    specs: list[dict[str, Any]], prices: list[dict[str, Any]], capacity: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Each spec with its price per hour (its price per GPU-hour, or per unit-hour for a
    shared GPU's units, times its GPUs or units, in USD) and how many of it would start
    now in each zone (`freeNow`; None for a shared GPU's units, which the fleet counts
    per whole GPU)."""
    now = datetime.now(UTC)
    in_force = sorted(
        (p for p in prices if p["meter"] == "gpu_hour" and _utc(p["effectiveFrom"]) <= now),
        key=lambda p: _utc(p["effectiveFrom"]),
    )
    per_gpu_hour = {p["specName"]: Decimal(str(p["amount"])) for p in in_force}
    found = []
    for spec in sorted(specs, key=lambda s: (s["gpuType"], s["gpuNum"], s["name"])):
        price = per_gpu_hour.get(spec["name"])
        units = Decimal(spec["gpuNum"])
        found.append({
            "specName": spec["name"], "gpuType": spec["gpuType"], "gpuNum": spec["gpuNum"],
            "cpu": spec["cpu"], "memory": spec["memory"],
            "pricePerHour": "no price set" if price is None else f"${price * units:.2f}/h",
            "freeNow": _fits(spec, capacity),
        })  # fmt: skip
    return found


def _fits(spec: dict[str, Any], capacity: list[dict[str, Any]]) -> dict[str, int] | None:
    """How many of the spec would fit now, in each zone it may run in: whole GPUs on
    one node each."""
    if spec.get("gpuWeight", "1") != "1":
        return None
    zones = spec.get("zones") or None  # none listed: any zone
    return {
        group["zone"]: sum(free // spec["gpuNum"] for free in group["freeByNode"])
        for group in capacity
        if group["gpuType"] == spec["gpuType"] and (zones is None or group["zone"] in zones)
    }


def _free(by_zone: dict[str, int] | None) -> str:
    if by_zone is None:
        return "shared GPU units"
    return ", ".join(f"{zone}: {count}" for zone, count in by_zone.items()) or "no such GPUs"


def _utc(stamp: str) -> datetime:
    """An API time, for comparing."""
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


@click.command("offer")
@pass_session
def offer(session: Session) -> None:
    """The specs you can start, with their GPUs and price per hour.

    \b
    Example:
      gpucloud offer
      gpucloud instances create --spec h100-1 --template jupyter
    """
    client = session.client
    found = offers(client.list_specs(), client.list_prices(), client.capacity())
    session.emit(found, OFFER_COLUMNS)


QUOTA_COLUMNS: list[Column] = [
    ("GPUS IN USE", lambda q: f"{q['gpusInUse']} of {q['maxGpus']}"),
    ("BORROWABLE", lambda q: q["borrowGpus"]),
    ("WORKLOADS", lambda q: f"{q['workloadsInUse']} of {q['maxInstances']}"),
    ("YOUR GPUS", lambda q: _yours(q["yourGpusInUse"], q.get("yourMaxGpus"))),
    ("YOUR MONTHLY SPEND", lambda q: _cents(q.get("yourMonthlySpendCents"))),
]


PROJECT_COLUMNS: list[Column] = [
    ("PROJECT", lambda p: p["project"]),
    ("GPUS IN USE", lambda p: _yours(p["gpusInUse"], p["maxGpus"])),
    ("BORROWABLE", lambda p: p["borrowGpus"]),
]


def _yours(held: int, limit: int | None) -> str:
    return f"{held}" if limit is None else f"{held} of {limit}"


def _cents(limit: int | None) -> str:
    return "no limit" if limit is None else f"up to {limit / 100:.2f}"


OWN_QUOTA_COLUMNS: list[Column] = [
    ("CEILING", lambda row: row["what"]),
    ("GPUS", lambda row: row["maxGpus"]),
    ("INSTANCES", lambda row: row["maxInstances"]),
    ("STORAGE BYTES", lambda row: row["maxStorageBytes"]),
    ("MONTHLY SPEND CAP (CENTS)", lambda row: row.get("monthlySpendCapCents")),
]


def _ceiling(option: str, value: str) -> int | None:
    """A whole number, or None for `none` (follow the platform's limit)."""
    if value.lower() == "none":
        return None
    if not value.isdigit():
        raise click.BadParameter(
            f"{value!r} is neither a whole number nor 'none'", param_hint=option
        )
    return int(value)


@click.group("quota", invoke_without_command=True)
@pass_session
@click.pass_context
def quota(ctx: click.Context, session: Session) -> None:
    """Your tenant's GPU quota and what its workloads hold of it now: what a start may
    still take, and your projects' shares of it. `quota set` tightens it (tenant admin)."""
    if ctx.invoked_subcommand is not None:
        return
    used = session.client.quota()
    session.emit(used, QUOTA_COLUMNS)
    # Only once there are projects besides default: a plain tenant's table stays one.
    if session.output == "table" and len(used.get("projects") or []) > 1:
        session.emit(used["projects"], PROJECT_COLUMNS, title="your projects")


@quota.command("set")
@click.option("--gpus", metavar="N|none", help="GPUs the tenant's workloads hold at once.")
@click.option("--instances", metavar="N|none", help="Workloads at once.")
@click.option("--storage-bytes", metavar="N|none", help="Bytes of storage.")
@click.option("--monthly-spend-cap-cents", metavar="N|none", help="Spend per month, in cents.")
@pass_session
def set_quota(
    session: Session,
    gpus: str | None,
    instances: str | None,
    storage_bytes: str | None,
    monthly_spend_cap_cents: str | None,
) -> None:
    """Tighten your tenant's own quota within the platform's limits (tenant admin).

    Only the options given change; `none` follows the platform's limit again. The GPUs
    may not go below what your projects' shares come to: lower those first."""
    given = {
        "--gpus": (gpus, "maxGpus"),
        "--instances": (instances, "maxInstances"),
        "--storage-bytes": (storage_bytes, "maxStorageBytes"),
        "--monthly-spend-cap-cents": (monthly_spend_cap_cents, "monthlySpendCapCents"),
    }
    changes = {
        field: _ceiling(option, value)
        for option, (value, field) in given.items()
        if value is not None
    }
    if not changes:
        raise click.UsageError(f"give at least one of {', '.join(given)}")
    own = {**session.client.own_tenant()["selfQuota"], **changes}
    tenant = session.client.set_own_quota(own)
    if session.output == "json":
        session.emit_json(tenant)
        return
    rows = [
        {"what": "platform's limits", **tenant["limits"]},
        {"what": "your own", **tenant["selfQuota"]},
        {"what": "enforced", **tenant["quota"]},
    ]
    session.emit(rows, OWN_QUOTA_COLUMNS)


@click.command("templates")
@pass_session
def templates(session: Session) -> None:
    """The app catalog: what `--template` starts (Jupyter, vLLM, Triton, an SSH box)."""
    session.emit(session.client.list_templates(), TEMPLATE_COLUMNS)
