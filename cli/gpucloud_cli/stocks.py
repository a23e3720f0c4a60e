"""`gpucloud stocks`: warm stocks, GPUs set aside per cluster and spec so that starts
skip the scheduler and the image pull (platform admin)."""

from __future__ import annotations

import uuid
from typing import Any

import click

from .session import Column, Session, pass_session

STOCK_COLUMNS: list[Column] = [
    ("CLUSTER", lambda s: s["cluster"]),
    ("SPEC", lambda s: s["specName"]),
    ("TARGET", lambda s: s["target"]),
    ("READY", lambda s: s["available"]),
    ("PLACING", lambda s: s["placing"]),
    ("IMAGES", lambda s: ", ".join(s["images"]) or "-"),
]


@click.group()
def stocks() -> None:
    """Warm stocks per cluster and spec (platform admin)."""


@stocks.command("ls")
@pass_session
def list_stocks(session: Session) -> None:
    """Each stock's target, ready units and units being placed."""
    session.emit(session.client.list_stocks(), STOCK_COLUMNS)


_CLUSTER = click.option(
    "--cluster", help="The cluster the units are kept in (`gpucloud clusters ls`); default: home."
)
_OPERATION = click.option(
    "--operation-id",
    help="Makes a retry safe: a change with an ID seen before is not applied again "
    "(default: a new one).",
)


@stocks.command("add")
@click.argument("spec")
@click.option("--units", type=click.IntRange(1, 1000), default=1, show_default=True)
@_CLUSTER
@click.option(
    "--image", "images", multiple=True, help="An image its units pull in advance (up to 4)."
)
@_OPERATION
@pass_session
def add_stock(
    session: Session, spec: str, units: int, cluster: str | None, images: tuple[str, ...],
    operation_id: str | None,
) -> None:  # fmt: skip
    """Set SPEC's units aside in a cluster."""
    body = _change(spec, units, cluster, operation_id)
    if images:
        body["images"] = list(images)
    session.emit(session.client.change_stock(body, add=True), STOCK_COLUMNS)


@stocks.command("remove")
@click.argument("spec")
@click.option("--units", type=click.IntRange(1, 1000), default=1, show_default=True)
@_CLUSTER
@_OPERATION
@pass_session
def remove_stock(
    session: Session, spec: str, units: int, cluster: str | None, operation_id: str | None
) -> None:
    """Give SPEC's units in a cluster back (ready ones last)."""
    body = _change(spec, units, cluster, operation_id)
    session.emit(session.client.change_stock(body, add=False), STOCK_COLUMNS)


def _change(spec: str, units: int, cluster: str | None, operation_id: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "specName": spec, "number": units, "operationID": operation_id or str(uuid.uuid4()),
    }  # fmt: skip
    if cluster is not None:
        body["cluster"] = cluster
    return body
