"""`gpucloud instances`: start, watch, open and stop GPU instances."""

from __future__ import annotations

import webbrowser
from typing import Any, TextIO

import click

from gpucloud_client.models import Instance
from gpucloud_client.workload_api import SETTLED_INSTANCE_STATES, STOPPED_INSTANCE_STATES

from .metrics import metrics_command
from .session import Column, Failure, Session, echo, moment, pass_session
from .ssh import exec_command, ssh_config

COLUMNS: list[Column] = [
    ("ID", lambda i: i["instanceID"]),
    ("STATE", lambda i: i["state"]),
    ("SPEC", lambda i: i["specName"]),
    ("GPUS", lambda i: f"{i['gpuCount']} x {i['gpuType']}"),
    ("CLUSTER", lambda i: i.get("cluster")),
    ("NODE", lambda i: i["node"]),
    ("IMAGE", lambda i: i["image"]),
    ("CREATED", lambda i: moment(i["createdAt"])),
]
DETAIL: list[Column] = [*COLUMNS, ("REASON", lambda i: i["reason"]), ("URLS", lambda i: i["urls"])]


@click.group()
def instances() -> None:
    """GPU instances: long-running pods with ports, storage and a URL."""


@instances.command("ls")
@click.option("--state", "states", multiple=True, help="Only these states (repeatable).")
@click.option("--project", help="Only this project's instances.")
@pass_session
def list_instances(session: Session, states: tuple[str, ...], project: str | None) -> None:
    """List the tenant's instances (every tenant's, for a platform admin; its project's
    alone, for a key of one project)."""
    listed = session.client.list_instances(states=list(states) or None, project=project)
    session.emit(listed, COLUMNS)


@instances.command("get")
@click.argument("instance_id")
@pass_session
def get_instance(session: Session, instance_id: str) -> None:
    """One instance, with its state history."""
    instance = session.client.get_instance(instance_id)
    session.emit(instance, DETAIL)
    if session.output == "table":
        for step in instance["history"]:
            reason = f" ({step['reason']})" if step.get("reason") else ""
            session.out.print(f"  {step['at'][:23]}  {step['state']}{reason}", highlight=False)


@instances.command("create")
@click.option("--spec", "spec_name", required=True, help="The spec (GPU type and count) to run on.")
@click.option(
    "--template",
    "template_id",
    help="Start a catalog template (`gpucloud templates`): its image, command, ports, "
    "environment and probe; the options below add to or replace them.",
)
@click.option(
    "--public-key",
    type=click.File("r"),
    help="Your SSH public key file, for a template that takes one (ssh-devbox).",
)
@click.option("--image", help="The container image (the template's, with --template).")
@click.option("--id", "instance_id", help="Your own id for it (default: generated).")
@click.option(
    "--region", help="Run in this region (`gpucloud regions`); default: any with the GPUs."
)
@click.option("--zone", help="Pin to a zone.")
@click.option(
    "--project", help="Run in this project of yours (`gpucloud projects`); default: default."
)
@click.option("--port", "ports", type=int, multiple=True, help="A public port (repeatable).")
@click.option(
    "--env",
    "envs",
    multiple=True,
    metavar="NAME=VALUE",
    help="An environment variable (repeatable).",
)
@click.option("--storage", "storages", multiple=True, help="A storage id to attach (repeatable).")
@click.option("--cmd", help="The command line to run instead of the image's.")
@click.option(
    "--user",
    "run_as_user",
    type=click.IntRange(min=1),
    help="The uid to run as, for an image whose own user is root (the template's).",
)
@click.option(
    "--queue",
    is_flag=True,
    help="Wait in the admission queue while the quota or free GPUs are short, instead of "
    "being refused.",
)
@click.option("--priority", type=int, default=0, help="With --queue: its place among yours.")
@click.option(
    "--wait/--no-wait", default=True, show_default=True, help="Wait until it runs (or fails)."
)
@pass_session
def create_instance(
    session: Session, spec_name: str, template_id: str | None, public_key: TextIO | None,
    image: str | None, instance_id: str | None, region: str | None, zone: str | None,
    project: str | None,
    ports: tuple[int, ...],
    envs: tuple[str, ...], storages: tuple[str, ...], cmd: str | None,
    run_as_user: int | None, queue: bool, priority: int, wait: bool,
) -> None:  # fmt: skip
    """Start an instance and, by default, wait until it runs.

    \b
    Examples:
      gpucloud instances create --spec h100-1 --image jupyter/base-notebook --port 8888
      gpucloud instances create --spec a100-2 --image pytorch/pytorch --storage models --no-wait
      gpucloud instances create --spec h100-8 --image pytorch/pytorch --queue
      gpucloud instances create --spec h100-1 --template jupyter
      gpucloud instances create --spec b200-8 --image pytorch/pytorch --region local-2
      gpucloud instances create --spec h100-1 --template ssh-devbox --public-key ~/.ssh/id_ed25519.pub
    """
    template: dict[str, Any] = {
        "ports": [{"port": port, "isPublic": True} for port in ports],
        "envs": parse_env(envs),
        **({"cmd": cmd} if cmd else {}),
    }
    if template_id:
        catalog = session.client.get_template(template_id)
        key = public_key.read().strip() if public_key else None
        if key is not None and not key.startswith(PUBLIC_KEY_PREFIXES):
            raise click.UsageError(
                "--public-key takes an SSH public key (a .pub file: ssh-ed25519 ...); "
                "a private key never leaves this machine"
            )
        image = image or catalog["image"]
        template = from_catalog(catalog, template, public_key=key)
    elif public_key:
        raise click.UsageError("--public-key goes with a --template that takes one")
    if not image:
        raise click.UsageError("give --image, or a --template")
    if run_as_user is not None:
        template["runAsUser"] = run_as_user
    body: dict[str, Any] = {
        "image": image,
        "specName": spec_name,
        "storageIDs": list(storages),
        "template": template,
        **({"instanceID": instance_id} if instance_id else {}),
        **({"zone": zone} if zone else {}),
        **({"project": project} if project else {}),
        **({"region": region} if region else {}),
        **({"queue": True, "priority": priority} if queue else {}),
    }
    instance = session.client.create_instance(body)
    if wait:
        instance = wait_until_settled(session, instance)
    session.emit(instance, DETAIL)
    if instance["state"] == "failed":
        raise Failure(f"instance {instance['instanceID']} failed: {instance['reason']}")


def wait_until_settled(
    session: Session, instance: Instance, until: set[str] = SETTLED_INSTANCE_STATES
) -> Instance:
    """Follow the instance's transitions (long poll) to one of `until`, with a live
    status line."""
    name = instance["instanceID"]
    with session.err.status(f"{name}: {instance['state']}") as status:

        def show(current: Instance) -> None:
            line = f"{name}: {current['state']}"
            if place := current.get("queue"):
                line += (
                    f" #{place['position']} ({place['reason']}, {place['gpusAhead']} GPUs ahead)"
                )
            status.update(line)
            if session.output == "table" and not session.err.is_terminal:
                session.note(line)

        return session.client.wait_for_instance(name, until=until, on_change=show)


#: How an OpenSSH public key line begins; a private key begins `-----BEGIN`.
PUBLIC_KEY_PREFIXES = ("ssh-", "ecdsa-", "sk-")


def from_catalog(
    catalog: dict[str, Any], given: dict[str, Any], *, public_key: str | None
) -> dict[str, Any]:
    """An instance template from a catalog template, with what the user gave on top:
    their ports replace the template's, their variables override its, their `--cmd`
    replaces its command. A template that reads a public key must be given one."""
    env = {e["name"]: e["value"] for e in catalog["env"]}
    given_env = {e["name"]: e["value"] for e in given["envs"]}
    if "PUBLIC_KEY" in env and not given_env.get("PUBLIC_KEY"):
        if not public_key:
            raise click.UsageError(
                f"template {catalog['templateID']!r} needs your SSH public key: --public-key FILE"
            )
        env["PUBLIC_KEY"] = public_key
    env |= given_env
    ports = given["ports"] or [
        {
            "port": p["port"],
            "isPublic": p["isPublic"],
            **(
                {"isProbe": True, "baseUrl": catalog["readinessPath"]}
                if p["port"] == catalog["servingPort"] and catalog["readinessPath"]
                else {}
            ),
        }
        for p in catalog["ports"]
    ]
    command: dict[str, Any] = (
        {"cmd": given["cmd"]}
        if given.get("cmd")
        else {
            **({"command": catalog["command"]} if catalog["command"] else {}),
            **({"args": catalog["args"]} if catalog["args"] else {}),
        }
    )
    return {
        "ports": ports,
        "envs": [{"name": k, "value": v} for k, v in env.items()],
        "runAsUser": catalog["runAsUser"],
        **command,
    }


@instances.command("stop")
@click.argument("instance_id")
@click.option("--wait/--no-wait", default=False, help="Wait until it has stopped.")
@pass_session
def stop_instance(session: Session, instance_id: str, wait: bool) -> None:
    """Stop an instance (its GPUs are released and billing ends). Safe to repeat: a
    stopped instance stays stopped, and its record stays."""
    instance = session.client.stop_instance(instance_id)
    if wait:
        instance = wait_until_settled(session, instance, STOPPED_INSTANCE_STATES)
    session.emit(instance, COLUMNS)


@instances.command("start")
@click.argument("instance_id")
@click.option(
    "--wait/--no-wait", default=True, show_default=True, help="Wait until it runs (or fails)."
)
@pass_session
def start_instance(session: Session, instance_id: str, wait: bool) -> None:
    """Start a stopped or failed instance again: the same id, spec, image, ports and
    storages, on a node chosen now, billed from when it holds GPUs again. Safe to
    repeat: one already starting or running is left as it is."""
    before = session.client.get_instance(instance_id)
    instance = session.client.start_instance(instance_id)
    if wait and instance["state"] not in {"running"}:
        name = instance["instanceID"]
        with session.err.status(f"{name}: starting"):
            instance = session.client.wait_for_instance(
                name, until={"running", "failed", "stopped"}, after_revision=before["revision"],
                # The controller refused the start (its message says why): it stays as it was.
                given_up=lambda now: not now.get("startRequested", True)
                and now["revision"] == before["revision"],
            )  # fmt: skip
        if instance["state"] != "running":
            raise Failure(
                f"instance {name} is {instance['state']}: "
                + (instance.get("message") or instance.get("reason") or "it did not start")
            )
    session.emit(instance, COLUMNS)


@instances.command("delete")
@click.argument("instance_id")
@pass_session
def delete_instance(session: Session, instance_id: str) -> None:
    """Delete the record of a stopped or failed instance."""
    instance = session.client.get_instance(instance_id)
    if instance["state"] not in {"stopped", "failed"}:
        raise Failure(
            f"instance {instance_id} is {instance['state']}: stop it first (`gpucloud instances stop`)"
        )
    session.emit(session.client.delete_instance(instance_id), COLUMNS)


@instances.command("logs")
@click.argument("instance_id")
@click.option("--follow", "-f", is_flag=True, help="Keep printing as the log grows, until it ends.")
@click.option("--tail", "tail_lines", type=int, help="Only the last N lines.")
@pass_session
def instance_logs(session: Session, instance_id: str, follow: bool, tail_lines: int | None) -> None:
    """Print a running instance's log (a tenant follows at most 4 logs at once)."""
    with session.client.instance_log(instance_id, follow=follow, tail_lines=tail_lines) as chunks:
        echo(chunks)


@instances.command("open")
@click.argument("instance_id")
@click.option("--port", type=int, help="Which public port (default: the first).")
@click.option(
    "--print-url", is_flag=True, help="Print the one-minute link instead of opening a browser."
)
@pass_session
def open_instance(session: Session, instance_id: str, port: int | None, print_url: bool) -> None:
    """Open the instance's URL in a browser through a one-minute session link."""
    if port is None:
        port = first_public_port(session.client.get_instance(instance_id))
    link = session.client.open_instance_session(instance_id, port)
    url = str(link["url"])
    if print_url or session.output == "json" or not webbrowser.open(url):
        if session.output == "json":
            session.emit_json(link)
        else:
            session.out.print(url, highlight=False, soft_wrap=True)


def first_public_port(instance: Instance) -> int:
    """The port of the instance's first URL (`https://<instance>--<port>--<tenant>.<domain>/`)."""
    for url in instance["urls"]:
        label = url.split("://", 1)[-1].split(".", 1)[0]
        fields = label.split("--")
        if len(fields) == 3 and fields[1].isdigit():
            return int(fields[1])
    raise Failure(f"instance {instance['instanceID']} has no public port; pass --port")


def parse_env(pairs: tuple[str, ...]) -> list[dict[str, str]]:
    env = []
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"{pair!r} is not NAME=VALUE", param_hint="--env")
        env.append({"name": name, "value": value})
    return env


instances.add_command(metrics_command("gpu-instances", "instance"))
instances.add_command(ssh_config)
instances.add_command(exec_command)
