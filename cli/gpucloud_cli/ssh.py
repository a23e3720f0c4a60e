"""`gpucloud ssh`, `gpucloud tunnel` and `gpucloud instances ssh-config`: SSH into an
instance through the gateway's authenticated WebSocket tunnel, with no port of the
instance open to the world."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from gpucloud_client.models import Instance

from . import config
from .session import Failure, Session, pass_session

F = TypeVar("F", bound=Callable[..., Any])

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


def ssh_target_options(user_help: str) -> Callable[[F], F]:
    """The SSH port and login user of a command that reaches an instance's sshd."""

    def decorate(command: F) -> F:
        command = click.option("--user", "-l", default=DEFAULT_SSH_USER, show_default=True,
                               help=user_help)(command)  # fmt: skip
        return click.option("--port", type=int, default=DEFAULT_SSH_PORT, show_default=True,
                            help="The instance's SSH port.")(command)  # fmt: skip

    return decorate


def host_key_alias(instance: Instance) -> str:
    """Known hosts are kept per instance, not per (shared) gateway address, and per stay
    on a node: an instance started again runs a new sshd with a new host key."""
    stays = sum(step["state"] == "pending" for step in instance["history"])
    return f"gpucloud-{instance['instanceID']}" + (f"-{stays}" if stays > 1 else "")


identity_option = click.option(
    "--identity",
    "-i",
    type=click.Path(exists=True, dir_okay=False, resolve_path=True),
    help="The private key to log in with (default: ssh's own choice).",
)


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
@ssh_target_options("Who to log in as (ssh-devbox's user; tenant pods never run as root).")
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
    args = list(ssh_args)
    if args[:1] == ["--"]:
        args = args[1:]
    run_ssh(ctx.obj, instance_id, port, user, after_host=args)


@click.command("exec", context_settings={"ignore_unknown_options": True})
@click.argument("instance_id")
@ssh_target_options("Who to run it as (ssh-devbox's user).")
@identity_option
@click.option(
    "--ssh-option",
    "ssh_options",
    multiple=True,
    metavar="NAME=VALUE",
    help="An option for ssh, as its -o takes it (repeatable).",
)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_context
def exec_command(
    ctx: click.Context, instance_id: str, port: int, user: str, identity: str | None,
    ssh_options: tuple[str, ...], command: tuple[str, ...],
) -> None:  # fmt: skip
    """Run one command in an instance over SSH, through the gateway, and exit with its
    exit code. No terminal and no prompt: for scripts. The command's words are quoted
    as given, so the remote shell sees them as they are here.

    \b
    Examples:
      gpucloud instances exec i-3f2a9c1b7d4e -- nvidia-smi -L
      gpucloud instances exec i-3f2a9c1b7d4e -i ~/.ssh/gpc -- python train.py --epochs 3
    """
    words = list(command)
    if words[:1] == ["--"]:
        words = words[1:]
    if not words:
        raise click.UsageError("give the command to run after the instance")
    # No prompt can be answered: a new instance's host key is taken on first use (it is
    # reached only through the authenticated tunnel) and kept under its own alias.
    options = ["-T", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=accept-new",
               *(["-i", identity] if identity else []),
               *(arg for option in ssh_options for arg in ("-o", option))]  # fmt: skip
    # One remote command line, after `--` so that ssh reads none of it as its own option.
    run_ssh(ctx.obj, instance_id, port, user, options, after_host=["--", shlex.join(words)])


def run_ssh(
    session: Session, instance_id: str, port: int, user: str, options: list[str] | None = None,
    *, after_host: list[str],
) -> None:  # fmt: skip
    """Replace this process with the system's ssh to the instance, tunnelled through the
    gateway; its exit code is ssh's (the remote command's, when one ran). `after_host`
    is what `gpucloud ssh` passes on: ssh's options or the remote command."""
    instance = session.client.get_instance(instance_id)  # a clear error now, not after ssh starts
    binary = shutil.which("ssh")
    if binary is None:
        raise Failure("`ssh` is not on PATH; install an OpenSSH client")
    proxy = shlex.join(proxy_command(session.profile_name, instance_id, port))
    command = [
        binary, "-o", f"ProxyCommand={proxy}",
        "-o", f"HostKeyAlias={host_key_alias(instance)}",
        "-p", str(port), "-l", user, *(options or []), instance_id, *after_host,
    ]  # fmt: skip
    sys.stdout.flush()
    os.execv(binary, command)  # noqa: S606 - ssh takes over, with a fixed argument list


@click.command("ssh-config")
@click.argument("instance_id")
@ssh_target_options("Who to log in as (ssh-devbox's user).")
@identity_option
@pass_session
def ssh_config(
    session: Session, instance_id: str, port: int, user: str, identity: str | None
) -> None:
    """Print an OpenSSH `Host gpc-ID` block for the instance, tunnelled through the
    gateway as `gpucloud ssh` is: append it to ~/.ssh/config, then `ssh gpc-ID`, scp,
    rsync and editors' remote SSH work as with any host.

    The block names the profile in use now, so it keeps reaching this cloud as this key
    whichever profile is current later.

    With `--identity`, the block logs in with that key alone: the private half of the
    public key the instance was started with (`instances create --public-key`).

    \b
    Example:
      gpucloud instances ssh-config i-3f2a9c1b7d4e -i ~/.ssh/id_ed25519 >> ~/.ssh/config
      ssh gpc-i-3f2a9c1b7d4e nvidia-smi
    """
    instance = session.client.get_instance(instance_id)  # a clear error now, not at the first ssh
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
        f"  HostKeyAlias {host_key_alias(instance)}",
        # ssh expands %-tokens in a ProxyCommand: a literal % (in a path) is written %%.
        f"  ProxyCommand {proxy.replace('%', '%%')}",
    ]
    if identity:
        # Quoted, for a path with spaces; ssh expands %-tokens here too.
        lines += [f'  IdentityFile "{identity.replace("%", "%%")}"', "  IdentitiesOnly yes"]
    click.echo("\n".join(lines))


def host_alias(instance_id: str) -> str:
    """The name the block gives the instance: `ssh gpc-<instance>`."""
    return f"gpc-{instance_id}"
