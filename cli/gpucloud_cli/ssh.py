"""`gpucloud ssh` and `gpucloud tunnel`: SSH into an instance through the gateway's
authenticated WebSocket tunnel, with no port of the instance open to the world."""

from __future__ import annotations

import os
import shlex
import shutil
import sys

import click

from .session import Failure, Session, pass_session

#: The SSH port of the catalog's ssh-devbox template.
DEFAULT_SSH_PORT = 2222


@click.command("tunnel")
@click.argument("instance_id")
@click.option("--port", type=int, default=DEFAULT_SSH_PORT, show_default=True,
              help="The instance's TCP port.")  # fmt: skip
@pass_session
def tunnel(session: Session, instance_id: str, port: int) -> None:
    """Connect stdin and stdout to a TCP port of an instance (an SSH ProxyCommand).

    \b
    Example, in ~/.ssh/config:
      Host gpc-*
        ProxyCommand gpucloud tunnel %n --port 2222
    """
    from gpucloud_client.tunnel import relay

    relay(session.client.open_tunnel(instance_id, port))


@click.command("ssh", context_settings={"ignore_unknown_options": True})
@click.argument("instance_id")
@click.option("--port", type=int, default=DEFAULT_SSH_PORT, show_default=True,
              help="The instance's SSH port.")  # fmt: skip
@click.option("--user", "-l", default="abc", show_default=True,
              help="Who to log in as (ssh-devbox's user; tenant pods never run as root).")  # fmt: skip
@click.argument("ssh_args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def ssh(
    ctx: click.Context, instance_id: str, port: int, user: str, ssh_args: tuple[str, ...]
) -> None:
    """SSH into an instance through the gateway; anything after the instance goes to ssh.

    \b
    Examples:
      gpucloud ssh i-3f2a9c1b7d4e
      gpucloud ssh i-3f2a9c1b7d4e --user jovyan -- nvidia-smi
      gpucloud ssh i-3f2a9c1b7d4e -- -L 6006:localhost:6006
    """
    session: Session = ctx.obj
    session.client.get_instance(instance_id)  # a clear error before ssh starts, not after
    binary = shutil.which("ssh")
    if binary is None:
        raise Failure("`ssh` is not on PATH; install an OpenSSH client")
    me = [sys.executable, "-m", "gpucloud_cli.main"]
    if session.profile_name:
        me += ["--profile", session.profile_name]
    proxy = shlex.join([*me, "tunnel", instance_id, "--port", str(port)])
    args = list(ssh_args)
    if args[:1] == ["--"]:
        args = args[1:]
    command = [
        binary, "-o", f"ProxyCommand={proxy}",
        # Known hosts are kept per instance, not per (shared) gateway address.
        "-o", f"HostKeyAlias=gpucloud-{instance_id}",
        "-p", str(port), "-l", user, instance_id, *args,
    ]  # fmt: skip
    sys.stdout.flush()
    os.execv(binary, command)  # noqa: S606 - ssh takes over, with a fixed argument list
