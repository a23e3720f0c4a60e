"""`gpucloud ssh`, `gpucloud tunnel` and `gpucloud instances ssh-config`: SSH into an
instance through the gateway's authenticated WebSocket tunnel, with no port of the
instance open to the world."""

from __future__ import annotations

import os
import shlex
import shutil
import sys

import click

from . import config
from .session import Failure, Session, pass_session

#: The SSH port of the catalog's ssh-devbox template.
DEFAULT_SSH_PORT = 2222
#: ssh-devbox's user (tenant pods never run as root).
DEFAULT_SSH_USER = "abc"


def proxy_command(profile: str | None, instance_id: str, port: int) -> list[str]:
    """This CLI's `tunnel` to the instance's port, as ssh runs it for a ProxyCommand:
    the interpreter that runs this command now, so no `gpucloud` need be on ssh's PATH."""
    me = [sys.executable, "-m", "gpucloud_cli.main"]
    if profile:
        me += ["--profile", profile]
    return [*me, "tunnel", instance_id, "--port", str(port)]


def host_key_alias(instance_id: str) -> str:
    """Known hosts are kept per instance, not per (shared) gateway address."""
    return f"gpucloud-{instance_id}"


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
@click.option("--user", "-l", default=DEFAULT_SSH_USER, show_default=True,
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
    proxy = shlex.join(proxy_command(session.profile_name, instance_id, port))
    args = list(ssh_args)
    if args[:1] == ["--"]:
        args = args[1:]
    command = [
        binary, "-o", f"ProxyCommand={proxy}",
        "-o", f"HostKeyAlias={host_key_alias(instance_id)}",
        "-p", str(port), "-l", user, instance_id, *args,
    ]  # fmt: skip
    sys.stdout.flush()
    os.execv(binary, command)  # noqa: S606 - ssh takes over, with a fixed argument list


@click.command("ssh-config")
@click.argument("instance_id")
@click.option("--port", type=int, default=DEFAULT_SSH_PORT, show_default=True,
              help="The instance's SSH port.")  # fmt: skip
@click.option("--user", "-l", default=DEFAULT_SSH_USER, show_default=True,
              help="Who to log in as (ssh-devbox's user).")  # fmt: skip
@pass_session
def ssh_config(session: Session, instance_id: str, port: int, user: str) -> None:
    """Print an OpenSSH `Host gpc-ID` block for the instance, tunnelled through the
    gateway as `gpucloud ssh` is: append it to ~/.ssh/config, then `ssh gpc-ID`, scp,
    rsync and editors' remote SSH work as with any host.

    The block names the profile in use now, so it keeps reaching this cloud as this key
    whichever profile is current later.

    \b
    Example:
      gpucloud instances ssh-config i-3f2a9c1b7d4e >> ~/.ssh/config
      ssh gpc-i-3f2a9c1b7d4e nvidia-smi
    """
    session.client.get_instance(instance_id)  # a clear error now, not at the first ssh
    profile: str | None = config.load(session.profile_name).name
    if profile == config.ENVIRONMENT_PROFILE:
        profile = None
        session.note("no profile to name: ssh must run with GPUCLOUD_ENDPOINT and "
                     "GPUCLOUD_API_KEY set, as this command did")  # fmt: skip
    proxy = shlex.join(proxy_command(profile, instance_id, port))
    lines = [
        f"# gpucloud instance {instance_id}: `gpucloud instances ssh-config {instance_id}`",
        f"Host {host_alias(instance_id)}",
        f"  HostName {instance_id}",
        f"  User {user}",
        f"  Port {port}",
        f"  HostKeyAlias {host_key_alias(instance_id)}",
        # ssh expands %-tokens in a ProxyCommand: a literal % (in a path) is written %%.
        f"  ProxyCommand {proxy.replace('%', '%%')}",
    ]
    click.echo("\n".join(lines))


def host_alias(instance_id: str) -> str:
    """The name the block gives the instance: `ssh gpc-<instance>`."""
    return f"gpc-{instance_id}"
