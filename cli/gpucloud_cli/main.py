"""The `gpucloud` command: a thin client of the public /v1 API."""

from __future__ import annotations

import sys
from typing import Any

import click
import httpx
from click.shell_completion import get_completion_class

from gpucloud_client import ApiError, Client, ClientError, Unreachable

from . import config
from .apply import apply
from .catalog import offer, quota, templates
from .clusters import clusters, regions
from .instances import instances
from .invitations import invitations, join
from .invoices import invoices
from .jobs import jobs
from .keys import keys
from .kubeconfig import kubeconfig
from .operator import fleet, prices, specs, tenants
from .projects import projects
from .services import services
from .session import Failure, Session, pass_session
from .ssh import ssh, tunnel
from .sso import sso, sso_login
from .stocks import stocks
from .storages import cp, storages
from .usage import alerts, revenue, usage
from .users import users

EXAMPLES = """
\b
Examples:
  gpucloud login --endpoint https://gpu.example.com
  gpucloud instances create --spec h100-1 --image jupyter/base-notebook --port 8888 --wait
  gpucloud apply -f stack.yaml
  gpucloud jobs submit job.yaml
  gpucloud cp -r ./dataset gpc://datasets/v1/
  gpucloud usage --group-by day -o json
"""


def describe(error: ClientError) -> str:
    if isinstance(error, ApiError):
        text = f"{error.title} ({error.code}, HTTP {error.status})"
        text = f"{text}: {error.detail}" if error.detail else text
        return "\n".join([text, *(f"  {field}: {message}" for field, message in error.fields)])
    if isinstance(error, Unreachable):
        return f"cannot reach the API at {error}"
    return str(error)


class GpucloudGroup(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ClientError as error:
            raise Failure(describe(error)) from error
        except (config.NotLoggedIn, config.UnsafeEndpoint, TimeoutError, OSError) as error:
            raise Failure(str(error)) from error
        finally:
            if isinstance(ctx.obj, Session):
                ctx.obj.close()


@click.group(cls=GpucloudGroup, epilog=EXAMPLES)
@click.option(
    "--profile", "-p", envvar="GPUCLOUD_PROFILE", help="Use this profile, not the current one."
)
@click.option(
    "--output", "-o", type=click.Choice(["table", "json"]), default="table", show_default=True,
    help="Tables for people, JSON for scripts.",
)  # fmt: skip
@click.version_option(package_name="gpucloud-cli")
@click.pass_context
def cli(ctx: click.Context, profile: str | None, output: str) -> None:
    """Rent GPUs, run jobs, move data: the gpucloud command line.

    `gpucloud login` first; then every command talks to that cloud as that key."""
    ctx.obj = Session(profile, output)


@cli.command()
@click.option("--endpoint", "-e", prompt="Endpoint", default="http://127.0.0.1:8000", show_default=True,
              help="The cloud's gateway URL.")  # fmt: skip
@click.option("--api-key-stdin", is_flag=True, help="Read the API key from stdin (for scripts).")
@click.option("--sso", "sso_tenant", metavar="TENANT", default=None,
              help="Sign in through TENANT's single sign-on instead: a code to enter at "
              "its provider, then a key for this machine.")  # fmt: skip
@click.option(
    "--profile", "name", default=None, help="Store as this profile (default: the current one)."
)
@click.pass_context
def login(
    ctx: click.Context, endpoint: str, api_key_stdin: bool, sso_tenant: str | None,
    name: str | None,
) -> None:  # fmt: skip
    """Check an API key against a cloud and store it as a profile (file mode 0600);
    or, with --sso, sign in through your tenant's provider.

    \b
    Examples:
      gpucloud login --endpoint https://gpu.example.com
      echo "$KEY" | gpucloud login -e https://gpu.example.com --api-key-stdin --profile prod
      gpucloud login -e https://gpu.example.com --sso t-acme
    """
    session: Session = ctx.obj
    config.check_endpoint(endpoint)  # before the key is asked for, let alone sent
    if sso_tenant is not None:
        sso_login(session, endpoint, sso_tenant, name)
        return
    key = (
        sys.stdin.readline().strip() if api_key_stdin else click.prompt("API key", hide_input=True)
    )
    if not key:
        raise click.UsageError("an API key is needed")
    with Client(endpoint, key) as client:
        who = client.whoami()
    name = name or session.profile_name or config.profiles()[0]
    config.save(config.Profile(name, endpoint, key))
    scope = f"tenant {who['tenantID']}" if who["tenantID"] else "the platform"
    session.note(f"logged in to {endpoint} as {who['role']} of {scope} (profile {name!r})")
    if session.output == "json":
        session.emit_json({"profile": name, "endpoint": endpoint, **who})


@cli.command()
@click.option(
    "--keep-key", is_flag=True, help="Only forget the key here; it keeps working elsewhere."
)
@pass_session
def logout(session: Session, keep_key: bool) -> None:
    """Revoke the current (or --profile) profile's API key on the server, and forget it.

    A key made for this machine should not outlive the login; `--keep-key` leaves it
    working (a key shared with scripts elsewhere)."""
    name = session.profile_name or config.profiles()[0]
    if not keep_key and name in config.profiles()[1]:
        # The profile's own key, never GPUCLOUD_API_KEY's (a script's, set in the shell).
        stored = config.load_profile(name)
        try:
            with Client(config.check_endpoint(stored.endpoint), stored.api_key) as client:
                key_id = client.whoami()["keyID"]
                if key_id is None:
                    raise ApiError(409, {"detail": "this credential is not an API key"})
                client.revoke_key(key_id)
            session.note(f"key {key_id} revoked on the server")
        except (ClientError, httpx.InvalidURL, config.UnsafeEndpoint) as error:
            # The bootstrap key, one this login may not revoke, or no answer: say so,
            # and forget it here anyway.
            session.note(f"the key may still be valid on the server: {error}")
    if not config.remove(name):
        raise Failure(f"no profile {name!r}")
    session.note(f"profile {name!r} removed")


@cli.group(invoke_without_command=True)
@pass_session
@click.pass_context
def profiles(ctx: click.Context, session: Session) -> None:
    """List the stored profiles; `profiles use NAME` switches."""
    if ctx.invoked_subcommand is None:
        current, endpoints = config.profiles()
        rows = [{"profile": name, "endpoint": url, "current": name == current}
                for name, url in endpoints.items()]  # fmt: skip
        session.emit(rows, [("PROFILE", lambda r: r["profile"]), ("ENDPOINT", lambda r: r["endpoint"]),
                            ("CURRENT", lambda r: "*" if r["current"] else "")])  # fmt: skip


@profiles.command("use")
@click.argument("name")
@pass_session
def use_profile(session: Session, name: str) -> None:
    """Make NAME the current profile."""
    config.use(name)
    session.note(f"now using profile {name!r}")


@cli.command()
@pass_session
def whoami(session: Session) -> None:
    """The identity behind the current key: role, tenant and scopes."""
    who = session.client.whoami()
    session.emit(who, [("ROLE", lambda w: w["role"]), ("TENANT", lambda w: w["tenantID"]),
                       ("USER", lambda w: w["userID"]), ("KEY", lambda w: w["keyID"]),
                       ("PROJECT", lambda w: w.get("project") or "-"),
                       ("SCOPES", lambda w: w["scopes"])])  # fmt: skip


@cli.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the shell completion script.

    \b
    Examples:
      eval "$(gpucloud completion bash)"        # in ~/.bashrc
      gpucloud completion fish > ~/.config/fish/completions/gpucloud.fish
    """
    completer = get_completion_class(shell)
    assert completer is not None  # the choice above lists only shells click supports
    click.echo(completer(cli, {}, "gpucloud", "_GPUCLOUD_COMPLETE").source())


for command in (
    apply,
    instances,
    services,
    jobs,
    storages,
    cp,
    usage,
    revenue,
    invoices,
    alerts,
    fleet,
    clusters,
    regions,
    tenants,
    specs,
    stocks,
    prices,
    ssh,
    tunnel,
    offer,
    quota,
    templates,
    users,
    keys,
    invitations,
    join,
    kubeconfig,
    sso,
    projects,
):
    cli.add_command(command)


def main() -> None:
    cli(prog_name="gpucloud")


if __name__ == "__main__":  # `python -m gpucloud_cli.main`: how `gpucloud ssh` runs its tunnel
    main()
