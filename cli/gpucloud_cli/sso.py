"""`gpucloud sso`: a tenant admin's single sign-on through an OpenID Connect provider;
and `gpucloud login --sso TENANT`, a user's sign-in through it (the device
authorization grant, brokered by the gateway, which keeps the client's secret)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import click

from gpucloud_client import Client

from .machine_keys import store_machine_key
from .session import Column, Session, pass_session

SSO_COLUMNS: list[Column] = [
    ("ISSUER", lambda s: s["issuer"]),
    ("CLIENT", lambda s: s["clientID"]),
    ("GROUPS", lambda s: ", ".join(f"{g}={r}" for g, r in s["groupRoles"].items()) or "-"),
    (
        "GROUP PROJECTS",
        lambda s: ", ".join(f"{g}={'+'.join(p)}" for g, p in s["groupProjects"].items()) or "-",
    ),
    ("OTHERS", lambda s: s["defaultRole"] or "refused"),
    ("NEW USERS", lambda s: "made" if s["createUsers"] else "refused"),
    ("CLI", lambda s: "allowed" if s["cliSignIn"] else "off"),
    ("PASSWORDS", lambda s: "allowed" if s["passwordSignIn"] else "refused"),
    ("REDIRECT URI", lambda s: s["redirectUri"]),
]


@click.group()
def sso() -> None:
    """Single sign-on for your tenant (tenant admin): your users sign in to the console
    through your OpenID Connect provider, their groups giving their role."""


@sso.command("set")
@click.option("--issuer", required=True, help="The provider's issuer URL (checked by discovery).")
@click.option("--client-id", required=True, help="The client registered for gpucloud there.")
@click.option("--client-secret-stdin", is_flag=True, help="Read the client secret from stdin.")
@click.option("--group", "groups", multiple=True, metavar="GROUP=ROLE",
              help="A provider group's role: tenant-user or tenant-admin (repeat).")  # fmt: skip
@click.option("--group-project", "group_projects", multiple=True, metavar="GROUP=PROJECT",
              help="A provider group's project: its members join it at sign-in, and leave "
              "it when they leave the group (repeat).")  # fmt: skip
@click.option("--default-role", type=click.Choice(["tenant-user", "tenant-admin"]),
              help="The role of a user none of whose groups is named (default: refused).")  # fmt: skip
@click.option("--no-new-users", is_flag=True, help="Admit only users an admin added first.")
@click.option("--cli", "cli_sign_in", is_flag=True,
              help="Let users sign the CLI in with a code entered at the provider "
              "(`gpucloud login --sso`); a code can be phished, so it is off unless set.")  # fmt: skip
@click.option("--sso-only", is_flag=True,
              help="Refuse password sign-in: users come in through the provider alone, so "
              "one who leaves it signs in no more.")  # fmt: skip
@pass_session
def set_sso(
    session: Session, issuer: str, client_id: str, client_secret_stdin: bool,
    groups: tuple[str, ...], group_projects: tuple[str, ...], default_role: str | None,
    no_new_users: bool, cli_sign_in: bool, sso_only: bool,
) -> None:  # fmt: skip
    """Set up single sign-on. Register the printed REDIRECT URI at the provider.

    \b
    Example:
      echo "$SECRET" | gpucloud sso set --issuer https://login.example.com \\
          --client-id gpucloud --client-secret-stdin --group ml-admins=tenant-admin \\
          --group-project vision-team=vision
    """
    secret = (
        sys.stdin.readline().strip() if client_secret_stdin
        else click.prompt("Client secret", hide_input=True)
    )  # fmt: skip
    roles: dict[str, str] = {}
    for pair in groups:
        group, _, role = pair.partition("=")
        if not group or role not in ("tenant-user", "tenant-admin"):
            raise click.BadParameter(f"{pair!r}: give GROUP=tenant-user or GROUP=tenant-admin",
                                     param_hint="--group")  # fmt: skip
        roles[group] = role
    projects: dict[str, list[str]] = {}
    for pair in group_projects:
        group, _, project = pair.partition("=")
        if not group or not project:
            raise click.BadParameter(f"{pair!r}: give GROUP=PROJECT", param_hint="--group-project")
        projects.setdefault(group, []).append(project)
    body: dict[str, Any] = {
        "issuer": issuer, "clientID": client_id, "clientSecret": secret, "groupRoles": roles,
        "groupProjects": projects,
        "defaultRole": default_role, "createUsers": not no_new_users, "cliSignIn": cli_sign_in,
        "passwordSignIn": not sso_only,
    }  # fmt: skip
    session.emit(session.client.sso(body), SSO_COLUMNS)


@sso.command("show")
@pass_session
def show_sso(session: Session) -> None:
    """Your tenant's single sign-on (never its secret)."""
    session.emit(session.client.sso(), SSO_COLUMNS)


@sso.command("off")
@pass_session
def sso_off(session: Session) -> None:
    """Turn single sign-on off: users sign in with a password or an API key again."""
    session.client.sso_off()
    session.note("single sign-on is off")


def sso_login(session: Session, endpoint: str, tenant_id: str, profile: str | None) -> None:
    """Show the code to enter at the provider, wait while the user does, then store a
    key for this machine."""
    email, name = sign_in_with_code(
        session, endpoint, lambda public: public.start_sso_device(tenant_id), profile
    )
    session.note(f"you are {email} of {tenant_id} (profile {name!r})")
    if session.output == "json":
        session.emit_json({"profile": name, "endpoint": endpoint, "email": email})


def sign_in_with_code(
    session: Session, endpoint: str, start: Callable[[Client], dict[str, Any]],
    profile: str | None,
) -> tuple[str, str]:  # fmt: skip
    """A device sign-in `start` begins at the gateway: the code shown, the gateway
    polled until the user finished at the provider, and a key for this machine
    stored. Returns the user's email and the profile's name."""
    with Client(endpoint, "") as public:
        started = start(public)
        where = started["verificationUriComplete"] or started["verificationUri"]
        # Shown whatever the output format (JSON too), and never wrapped: the link is
        # to be copied whole.
        click.echo(
            f"To sign in, open\n  {where}\nand enter the code {started['userCode']} "
            f"(within {started['expiresIn'] // 60} minutes). Waiting...",
            err=True,
        )
        deadline = time.monotonic() + started["expiresIn"]
        interval = started["interval"]
        while True:
            time.sleep(interval)
            result = public.poll_sso_device(started["pollToken"])
            if result["status"] == "signed_in":
                break
            interval = result["interval"] or interval
            if time.monotonic() > deadline:
                raise click.ClickException("the code expired before the sign-in; run it again")
    return result["email"], store_machine_key(session, endpoint, result["token"], profile)
