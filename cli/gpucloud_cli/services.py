"""`gpucloud services`: inference services, several replicas behind one URL."""

from __future__ import annotations

import shlex
from typing import Any

import click

from .instances import parse_env
from .metrics import metrics_command
from .session import Column, Session, moment, pass_session

COLUMNS: list[Column] = [
    ("ID", lambda s: s["serviceID"]),
    ("STATE", lambda s: s["state"]),
    ("SPEC", lambda s: s["specName"]),
    ("CLUSTER", lambda s: s.get("cluster")),
    ("REPLICAS", lambda s: f"{s['readyReplicas']}/{s['desiredReplicas']}"),
    ("REVISION", lambda s: s["revision"]),
    ("URL", lambda s: s["url"]),
]
REPLICA_COLUMNS: list[Column] = [
    ("REPLICA", lambda r: r["replicaID"]),
    ("REVISION", lambda r: r["revision"]),
    ("STATE", lambda r: r["state"]),
    ("NODE", lambda r: r["node"]),
    ("SCHEDULED", lambda r: moment(r["scheduledAt"])),
    ("ENDED", lambda r: moment(r["endedAt"])),
]


@click.group()
def services() -> None:
    """Inference services: replicas of a model server behind one URL, rolled out
    revision by revision, billed per replica."""


@services.command("ls")
@click.option("--project", help="Only this project's services.")
@pass_session
def list_services(session: Session, project: str | None) -> None:
    """List the tenant's services (its project's alone, for a key of one project)."""
    session.emit(session.client.list_services(project=project), COLUMNS)


@services.command("get")
@click.argument("service_id")
@pass_session
def get_service(session: Session, service_id: str) -> None:
    """One service: its state, replicas and URL."""
    session.emit(session.client.get_service(service_id), COLUMNS)


@services.command("create")
@click.argument("service_id")
@click.option("--spec", "spec_name", required=True, help="The spec each replica runs on.")
@click.option("--template", "template_id", help="A catalog template that serves (vllm, triton).")
@click.option("--image", help="The server's image (the template's, with --template).")
@click.option("--port", type=int, help="The port replicas serve on (the template's).")
@click.option("--readiness-path", help="Where a replica says it is ready (the template's).")
@click.option("--replicas", "min_replicas", type=int, default=1, show_default=True)
@click.option("--max-replicas", type=int, help="With autoscaling: at most this many.")
@click.option(
    "--region", help="Run in this region (`gpucloud regions`); default: any with the GPUs."
)
@click.option(
    "--project", help="Run in this project of yours (`gpucloud projects`); default: default."
)
@pass_session
def create_service(
    session: Session, service_id: str, spec_name: str, template_id: str | None,
    image: str | None, port: int | None, readiness_path: str | None, min_replicas: int,
    max_replicas: int | None, region: str | None, project: str | None,
) -> None:  # fmt: skip
    """Create a service and print its URL.

    \b
    Examples:
      gpucloud services create chat --spec h100-1 --template vllm-openai --replicas 2
      gpucloud services create echo --spec l40s-1 --image hashicorp/http-echo --port 5678
    """
    body: dict[str, Any] = {"serviceID": service_id, "specName": spec_name,
                            "minReplicas": min_replicas}  # fmt: skip
    if template_id:
        template = session.client.get_template(template_id)
        if "service" not in template["kinds"] or template["servingPort"] is None:
            raise click.UsageError(
                f"template {template_id!r} does not serve: start it as an instance"
            )
        body |= {
            "image": template["image"], "command": template["command"], "args": template["args"],
            "env": template["env"], "port": template["servingPort"],
            "readinessPath": template["readinessPath"] or "/", "runAsUser": template["runAsUser"],
        }  # fmt: skip
    body |= {key: value for key, value in (("image", image), ("port", port),
             ("readinessPath", readiness_path), ("maxReplicas", max_replicas),
             ("region", region), ("project", project)) if value}  # fmt: skip
    if "image" not in body or "port" not in body:
        raise click.UsageError("give --image and --port, or a --template")
    session.emit(session.client.create_service(body), COLUMNS)


@services.command("update")
@click.argument("service_id")
@click.option("--image", help="A new image for the server.")
@click.option("--env", multiple=True, help="NAME=VALUE, repeatable: replaces the whole env.")
@click.option("--command", "command_line", help="A new command line (split as a shell would).")
@pass_session
def update_service(
    session: Session, service_id: str, image: str | None, env: tuple[str, ...],
    command_line: str | None,
) -> None:  # fmt: skip
    """Roll out a new revision: replicas are replaced one by one, and `rollback` goes back.

    \b
    Example:
      gpucloud services update chat --image vllm/vllm-openai:v0.6.4
    """
    changes: dict[str, Any] = {}
    if image:
        changes["image"] = image
    if env:
        changes["env"] = parse_env(env)
    if command_line is not None:
        changes["command"] = shlex.split(command_line)
    if not changes:
        raise click.UsageError("give what changes: --image, --env or --command")
    session.emit(session.client.update_service(service_id, changes), COLUMNS)


@services.command("scale")
@click.argument("service_id")
@click.option("--replicas", "min_replicas", type=int, required=True, help="How many to run.")
@click.option("--max-replicas", type=int, help="With autoscaling: at most this many.")
@pass_session
def scale_service(
    session: Session, service_id: str, min_replicas: int, max_replicas: int | None
) -> None:
    """Set how many replicas run (0 scales to zero until a request comes)."""
    changes: dict[str, Any] = {"minReplicas": min_replicas}
    if max_replicas is not None:
        changes["maxReplicas"] = max_replicas
    else:
        # Raise the ceiling only where the new floor goes above it; never lower it.
        ceiling = session.client.get_service(service_id)["maxReplicas"]
        if min_replicas > ceiling:
            changes["maxReplicas"] = min_replicas
    session.emit(session.client.update_service(service_id, changes), COLUMNS)


@services.command("rollback")
@click.argument("service_id")
@click.option(
    "--to", "revision", type=int, help="The revision to go back to (default: the one before)."
)
@pass_session
def rollback_service(session: Session, service_id: str, revision: int | None) -> None:
    """Roll back: a new revision with an earlier one's template."""
    if revision is None:
        current = session.client.get_service(service_id)["revision"]
        if current <= 1:
            raise click.UsageError(f"service {service_id} has no revision before {current}")
        revision = current - 1
    session.emit(session.client.rollback_service(service_id, revision), COLUMNS)


@services.command("delete")
@click.argument("service_id")
@click.option("--yes", is_flag=True, help="Do not ask.")
@pass_session
def delete_service(session: Session, service_id: str, yes: bool) -> None:
    """Delete a service: its replicas stop and its URL goes."""
    if not yes and session.interactive:
        click.confirm(f"Delete service {service_id} and stop its replicas?", abort=True)
    session.emit(session.client.delete_service(service_id), COLUMNS)


@services.command("replicas")
@click.argument("service_id")
@pass_session
def service_replicas(session: Session, service_id: str) -> None:
    """Every replica the service has run, with the interval it is billed for: the sum of
    (ended - scheduled) x GPUs is the service's GPU time."""
    session.emit(session.client.service_replicas(service_id), REPLICA_COLUMNS)


services.add_command(metrics_command("inference-services", "service"))
