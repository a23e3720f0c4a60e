"""`gpucloud invitations`: a tenant admin invites people by email, with a role; and
`gpucloud join`, the invited person accepting the link: they set their name and
password, and the CLI logs in as them."""

from __future__ import annotations

import sys
from typing import Any
from urllib.parse import urlsplit

import click

from gpucloud_client import Client

from . import config
from .machine_keys import store_machine_key
from .session import Column, Session, moment, pass_session
from .sso import sign_in_with_code

INVITATION_COLUMNS: list[Column] = [
    ("ID", lambda i: i["invitationID"]),
    ("EMAIL", lambda i: i["email"]),
    ("ROLE", lambda i: i["role"]),
    ("PROJECTS", lambda i: ", ".join(i["projects"]) or "-"),
    ("STATUS", lambda i: i["status"]),
    ("EXPIRES", lambda i: moment(i["expiresAt"])),
    ("USER", lambda i: i["userID"]),
]


@click.group()
def invitations() -> None:
    """Invitations to your tenant (tenant admin): the invited person accepts the link
    with `gpucloud join LINK` or in the console, and becomes a user with the role."""


@invitations.command("create")
@click.argument("email")
@click.option(
    "--role", type=click.Choice(["tenant-user", "tenant-admin"]), default="tenant-user",
    show_default=True,
)  # fmt: skip
@click.option("--days", type=click.IntRange(1, 30), default=7, show_default=True,
              help="How long the link works.")  # fmt: skip
@click.option("--project", "projects", multiple=True,
              help="A project they join on accepting (repeat; everyone is in default).")  # fmt: skip
@pass_session
def create_invitation(
    session: Session, email: str, role: str, days: int, projects: tuple[str, ...]
) -> None:
    """Invite EMAIL to your tenant. The link is printed this once: send it to them.

    \b
    Example:
      gpucloud invitations create ada@acme.test --role tenant-user --days 3 --project vision
    """
    body = {"email": email, "role": role, "days": days, "projects": list(projects)}
    made = session.client.invite(body)
    link = f"{session.client.endpoint}{made['path']}"
    if session.output == "json":
        session.emit_json({**made, "link": link})
        return
    session.emit(made["invitation"], INVITATION_COLUMNS)
    session.note(
        f"the invitation's link, shown this once (it works once, until {made['invitation']['expiresAt']}):"
    )
    click.echo(link)


@invitations.command("ls")
@pass_session
def list_invitations(session: Session) -> None:
    """Your tenant's invitations: pending, accepted, expired and revoked."""
    session.emit(session.client.list_invitations(), INVITATION_COLUMNS)


@invitations.command("revoke")
@click.argument("invitation_id")
@pass_session
def revoke_invitation(session: Session, invitation_id: str) -> None:
    """Revoke an invitation: its link stops working at once."""
    session.client.revoke_invitation(invitation_id)
    session.note(f"invitation {invitation_id} revoked")


@click.command("join")
@click.argument("link")
@click.option("--name", help="How the console and reports name you (asked if not given).")
@click.option("--password-stdin", is_flag=True, help="Read the new password from stdin.")
@click.option("--sso", is_flag=True,
              help="Sign in at your tenant's provider with the invited email instead of "
              "setting a password (a code to enter there).")  # fmt: skip
@click.option("--profile", "profile", default=None, help="Store the login as this profile.")
@pass_session
def join(
    session: Session, link: str, name: str | None, password_stdin: bool, sso: bool,
    profile: str | None,
) -> None:  # fmt: skip
    """Accept an invitation LINK: set your name and a password (12 characters or
    more), or with --sso sign in at your tenant's provider; then log in as the new
    user (an API key for this machine, as `login` does).

    \b
    Examples:
      gpucloud join 'https://gpu.example.com/join#gpi_…' --name "Ada Lovelace"
      gpucloud join 'https://gpu.example.com/join#gpi_…' --sso
    """
    endpoint, token = _parse_link(link)
    config.check_endpoint(endpoint)
    with Client(endpoint, "") as public:
        offer = public.preview_invitation(token)
        projects = f", in projects {', '.join(offer['projects'])}" if offer["projects"] else ""
        session.note(
            f"joining {offer['tenantName']} ({offer['tenantID']}) as {offer['role']}, "
            f"email {offer['email']}{projects}"
        )
        if sso:
            user: dict[str, Any] = {"email": offer["email"]}
        else:
            name = name or click.prompt("Your name")
            password = (
                sys.stdin.readline().rstrip("\n") if password_stdin
                else click.prompt("New password", hide_input=True, confirmation_prompt=True)
            )  # fmt: skip
            user = public.accept_invitation(token, name, password)
            signed_in = public.sign_in(user["email"], password)
    if sso:
        _, name_of_profile = sign_in_with_code(
            session, endpoint, lambda client: client.join_by_sso_device(token), profile
        )
    else:
        name_of_profile = store_machine_key(session, endpoint, signed_in, profile)
    session.note(f"you are {user['email']} of {offer['tenantID']} (profile {name_of_profile!r})")
    if session.output == "json":
        shown: dict[str, Any] = {"profile": name_of_profile, "endpoint": endpoint, "user": user}
        session.emit_json(shown)


def _parse_link(link: str) -> tuple[str, str]:
    """The gateway's endpoint and the invitation's secret, from the link as sent."""
    parts = urlsplit(link.strip())
    if not parts.scheme or not parts.netloc or not parts.fragment:
        raise click.BadParameter(
            "give the whole link, as sent: https://…/join#gpi_…", param_hint="LINK"
        )
    return f"{parts.scheme}://{parts.netloc}", parts.fragment
