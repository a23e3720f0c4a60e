"""`gpucloud users`: the people of a tenant, and their roles."""

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
