"""`gpucloud users`: the people of a tenant, their roles and their own limits."""

from __future__ import annotations

from typing import Any

import click

from .session import Column, Session, moment, pass_session

USER_COLUMNS: list[Column] = [
    ("ID", lambda u: u["userID"]),
    ("NAME", lambda u: u["name"]),
    ("EMAIL", lambda u: u["email"]),
    ("ROLE", lambda u: u["role"]),
    ("STATUS", lambda u: u["status"]),
    ("CREATED", lambda u: moment(u["createdAt"])),
]

tenant_option = click.option(
    "--tenant",
    help="Another tenant's (platform admin); default: your own tenant's, or the operators'.",
)


@click.group()
def users() -> None:
    """Users and their roles: a tenant admin's for their tenant, a platform admin's for
    any tenant (`--tenant`) and for the operators."""


@users.command("ls")
@tenant_option
@pass_session
def list_users(session: Session, tenant: str | None) -> None:
    """List users."""
    session.emit(session.client.list_users(tenant=tenant), USER_COLUMNS)


@users.command("add")
@click.argument("email")
@click.option("--name", required=True, help="How the console and reports name them.")
@click.option(
    "--role",
    type=click.Choice(["tenant-user", "tenant-admin", "platform-admin"]),
    default="tenant-user",
    show_default=True,
)
@tenant_option
@pass_session
def add_user(session: Session, email: str, name: str, role: str, tenant: str | None) -> None:
    """Add a user. They sign in with an API key an admin makes for them, or with a
    password set in the console.

    \b
    Examples:
      gpucloud users add ada@acme.test --name "Ada Lovelace"
      gpucloud users add bob@acme.test --name Bob --role tenant-admin --tenant acme
    """
    body: dict[str, Any] = {"email": email, "name": name, "role": role}
    session.emit(session.client.add_user(body, tenant=tenant), USER_COLUMNS)


@users.command("set")
@click.argument("user")
@click.option("--name", help="How the console and reports name them.")
@click.option("--role", type=click.Choice(["tenant-user", "tenant-admin"]))
@click.option(
    "--disable",
    "status",
    flag_value="disabled",
    help="End their access: every key and session of theirs stops at once.",
)
@click.option("--enable", "status", flag_value="active", help="Give their access back.")
@pass_session
def set_user(
    session: Session, user: str, name: str | None, role: str | None, status: str | None
) -> None:  # fmt: skip
    """Change USER's (an id or an email) name, role, or access (tenant admin).

    \b
    Examples:
      gpucloud users set ada@acme.test --role tenant-admin
      gpucloud users set ada@acme.test --disable
    """
    body = {k: v for k, v in (("name", name), ("role", role), ("status", status)) if v}
    if not body:
        raise click.UsageError("say what to change: --name, --role, --disable or --enable")
    session.emit(session.client.update_user(user_id_of(session, user), body), USER_COLUMNS)


@users.command("rm")
@click.argument("user")
@pass_session
def remove_user(session: Session, user: str) -> None:
    """Remove USER (an id or an email): their keys, sessions, limits and project
    memberships go with them (tenant admin)."""
    session.client.delete_user(user_id_of(session, user))
    session.note(f"{user} removed")


LIMIT_COLUMNS: list[Column] = [
    ("MAX GPUS", lambda limits: limits["maxGpus"]),
    ("MONTHLY SPEND (CENTS)", lambda limits: limits["monthlySpendCents"]),
]


@users.command("limits")
@click.argument("user")
@click.option("--gpus", type=click.IntRange(0), help="GPUs their workloads may hold at once.")
@click.option(
    "--monthly-spend-cents", type=click.IntRange(0),
    help="What their workloads may cost per calendar month; at it they stop.",
)  # fmt: skip
@click.option("--clear", is_flag=True, help="Take every limit off (the tenant's quota only).")
@pass_session
def user_limits(
    session: Session, user: str, gpus: int | None, monthly_spend_cents: int | None, clear: bool
) -> None:
    """Show, or set, USER's own limits inside the tenant's quota (tenant admin). A start
    past them is refused, or waits in the queue while the user's other work runs.

    \b
    Examples:
      gpucloud users limits ada@acme.test
      gpucloud users limits ada@acme.test --gpus 4 --monthly-spend-cents 50000
      gpucloud users limits ada@acme.test --clear
    """
    user_id = user_id_of(session, user)
    if clear and (gpus is not None or monthly_spend_cents is not None):
        raise click.UsageError("--clear takes no other limit")
    body: dict[str, Any] | None = None
    if clear:
        body = {"maxGpus": None, "monthlySpendCents": None}
    elif gpus is not None or monthly_spend_cents is not None:
        # Unchanged limits are kept: the PUT sets both.
        body = {**session.client.user_limits(user_id)}
        body.update(
            {
                k: v
                for k, v in (("maxGpus", gpus), ("monthlySpendCents", monthly_spend_cents))
                if v is not None
            }
        )
    session.emit(session.client.user_limits(user_id, body), LIMIT_COLUMNS)


def user_id_of(session: Session, user: str) -> str:
    """A user's id from their id or email (among the caller's tenant's users)."""
    if "@" not in user:
        return user
    for found in session.client.list_users():
        if found["email"] == user.lower():
            return str(found["userID"])
    raise click.BadParameter(f"no user of your tenant has the email {user!r}", param_hint="USER")
