"""`gpucloud clusters`: the Kubernetes clusters workloads are placed in (platform admin)."""

from __future__ import annotations

from typing import Any

import click

from .session import Column, Session, moment, pass_session


def _health(cluster: dict[str, Any]) -> str:
    health = cluster["health"]
    if health is None:
        return "not looked at yet"
    if not health["reachable"]:
        return f"unreachable since {moment(health['unreachableSince'])}"
    return f"{health['readyNodes']}/{health['nodes']} nodes ready"


def _gpus(cluster: dict[str, Any]) -> str:
    health = cluster["health"] or {"gpus": []}
    return ", ".join(_units(g) for g in health["gpus"]) or "-"


def _units(gpus: dict[str, Any]) -> str:
    """`16 x NVIDIA-B200`; a shared kind says which: `28 x NVIDIA-A100 (mig-1g.5gb)`."""
    kind = gpus["resource"].removeprefix("nvidia.com/")
    return f"{gpus['capacity']} x {gpus['gpuType']}" + ("" if kind == "gpu" else f" ({kind})")


CLUSTER_COLUMNS: list[Column] = [
    ("CLUSTER", lambda c: c["name"] + (" (home)" if c["home"] else "")),
    ("REGION", lambda c: c["region"]),
    ("ZONES", lambda c: ", ".join(c["zones"] or (c["health"] or {}).get("zones", []))),
    ("STATE", lambda c: c["state"]),
    ("HEALTH", _health),
    ("VERSION", lambda c: (c["health"] or {}).get("version")),
    ("GPUS", _gpus),
    ("WORKLOADS", lambda c: c["workloads"]),
]


REGION_COLUMNS: list[Column] = [
    ("REGION", lambda r: r["name"]),
    ("ZONES", lambda r: ", ".join(r["zones"])),
    ("GPU TYPES", lambda r: ", ".join(r["gpuTypes"]) or "-"),
    ("OPEN", lambda r: "yes" if r["open"] else "no: takes no new workloads now"),
]


@click.command("regions")
@pass_session
def regions(session: Session) -> None:
    """The regions workloads may be placed in (`--region`), with their zones and GPU types."""
    session.emit(session.client.list_regions(), REGION_COLUMNS)


@click.group()
def clusters() -> None:
    """Kubernetes clusters: register, cordon, drain and remove them (platform admin)."""


@clusters.command("ls")
@pass_session
def list_clusters(session: Session) -> None:
    """Every cluster, with its state, health and GPUs."""
    session.emit(session.client.list_clusters(), CLUSTER_COLUMNS)


@clusters.command("get")
@click.argument("name")
@pass_session
def get_cluster(session: Session, name: str) -> None:
    """One cluster."""
    session.emit(session.client.get_cluster(name), CLUSTER_COLUMNS)


@clusters.command("register")
@click.argument("name")
@click.option("--region", required=True, help="Its region, as tenants pick it.")
@click.option(
    "--zone", "zones", multiple=True, required=True,
    help="A zone its nodes are in (topology.kubernetes.io/zone); repeat for each.",
)  # fmt: skip
@click.option(
    "--kubeconfig", type=click.File("r"), required=True,
    help="The kubeconfig the platform reaches it with; sealed, never shown again.",
)  # fmt: skip
@click.option(
    "--storage-kubeconfig", type=click.File("r"),
    help="The storage service's own kubeconfig for it (its tenant storage role), so that "
    "workloads there get their object storages; sealed, never shown again.",
)  # fmt: skip
@pass_session
def register_cluster(
    session: Session, name: str, region: str, zones: tuple[str, ...], kubeconfig: Any,
    storage_kubeconfig: Any,
) -> None:  # fmt: skip
    """Register a cluster: it must answer, and the kubeconfig must hold the rights the
    platform needs there (the chart's ClusterRole)."""
    body = {"name": name, "region": region, "zones": list(zones), "kubeconfig": kubeconfig.read()}
    registered = session.client.register_cluster(body)
    if storage_kubeconfig is not None:
        session.client.give_storage_access(name, storage_kubeconfig.read())
        session.note(f"the storage service reaches cluster {name}")
    session.emit(registered, CLUSTER_COLUMNS)


def _state_command(verb: str, help_text: str) -> click.Command:
    @click.argument("name")
    @pass_session
    def command(session: Session, name: str) -> None:
        session.emit(session.client.set_cluster_state(name, verb), CLUSTER_COLUMNS)

    return click.command(verb, help=help_text)(command)


for _verb, _help in (
    ("cordon", "Place no new workloads in the cluster; those in it go on."),
    ("drain", "Place no new workloads in the cluster, before removing it."),
    ("uncordon", "Place new workloads in the cluster again."),
):
    clusters.add_command(_state_command(_verb, _help))


@clusters.command("rm")
@click.argument("name")
@click.option("--yes", is_flag=True, help="Do not ask first.")
@pass_session
def remove_cluster(session: Session, name: str, yes: bool) -> None:
    """Forget a cluster that runs no workload and keeps no warm stock (drain it first)."""
    if not yes:
        click.confirm(f"Forget cluster {name}? Its kubeconfig is thrown away.", abort=True)
    session.client.delete_cluster(name)
    session.client.take_storage_access(name)
    session.note(f"cluster {name} removed")
