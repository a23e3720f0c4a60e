"""`gpucloud kubeconfig`: kubectl for a project's namespace (your tenant's own, for
`default`), with a short-lived credential of your own."""

from __future__ import annotations

import os
from pathlib import Path

import click

from .session import Session, pass_session


@click.command("kubeconfig")
@click.option("--hours", type=click.IntRange(1, 12), default=1, show_default=True,
              help="How long the credential works.")  # fmt: skip
@click.option("--project", help="The project whose namespace it reaches: one you are a member "
              "of (default: default, or your key's project for a key of one).")  # fmt: skip
@click.option(
    "--file", "path", type=click.Path(dir_okay=False, path_type=Path),
    help="Write it here (mode 0600) instead of to stdout.",
)  # fmt: skip
@pass_session
def kubeconfig(session: Session, hours: int, project: str | None, path: Path | None) -> None:
    """A kubeconfig for a project's namespace (your tenant's own, for `default`): list
    and watch its pods and events, read logs, exec and port-forward. It cannot create
    pods (start work with `gpucloud instances create` or `jobs submit`, which hold it
    to your quota and bill it). It ends after --hours, or at once when you lose access
    (to the platform, or to the project).

    \b
    Examples:
      gpucloud kubeconfig --file ~/.kube/gpucloud.yaml && export KUBECONFIG=~/.kube/gpucloud.yaml
      gpucloud kubeconfig --project vision --file ~/.kube/vision.yaml
      kubectl get pods
    """
    issued = session.client.kubeconfig(hours, project)
    if path is None:
        click.echo(issued["kubeconfig"], nl=False)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as out:
            out.write(issued["kubeconfig"])
        path.chmod(0o600)  # one written before, with looser bits
        session.note(f"wrote {path}: export KUBECONFIG={path}")
    session.note(
        f"namespace {issued['namespace']} (project {issued['project']}) of cluster "
        f"{issued['cluster']}, until {issued['expiresAt']}"
    )
