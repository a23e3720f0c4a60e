"""`gpucloud keys`: API keys, yours or (an admin's) the tenant's; and `gpucloud users
key`, an admin minting one for a user, who need not sign in to get it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import click

from .session import Column, Session, moment, pass_session
from .users import user_id_of, users

KEY_COLUMNS: list[Column] = [
    ("ID", lambda k: k["keyID"]),
    ("NAME", lambda k: k["name"]),
    ("USER", lambda k: k["userID"]),
    ("ROLE", lambda k: k["role"]),
    ("PROJECT", lambda k: k.get("project") or "-"),
    ("EXPIRES", lambda k: moment(k["expiresAt"])),
    ("LAST USED", lambda k: moment(k["lastUsedAt"])),
    ("REVOKED", lambda k: moment(k["revokedAt"])),
]


@click.group()
def keys() -> None:
    """API keys: yours, or for an admin every key of the tenant."""


@keys.command("ls")
@click.option("--user", help="Only this user's keys (id or email; an admin's view).")
@pass_session
def list_keys(session: Session, user: str | None) -> None:
    """List API keys, revoked ones included."""
    listed = list(session.client.list_keys())
    if user is not None:
        user_id = user_id_of(session, user)
        listed = [key for key in listed if key["userID"] == user_id]
    session.emit(listed, KEY_COLUMNS)


_DAYS = click.option(
    "--days", type=click.IntRange(1, 366), default=90, show_default=True,
    help="How long it works.",
)  # fmt: skip
_PROJECT = click.option(
    "--project",
    help="A key of this one project: it starts, lists and reaches that project's work "
    "alone, and stops working if its user leaves the project.",
)


def _key_body(name: str, days: int, role: str | None, project: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": name, "expiresAt": (datetime.now(UTC) + timedelta(days=days)).isoformat(),
    }  # fmt: skip
    if role is not None:
        body["role"] = role
    if project is not None:
        body["project"] = project
    return body


def _show_secret(session: Session, made: dict[str, Any], whose: str) -> None:
    """The new key, its secret printed this once."""
    if session.output == "json":
        session.emit_json(made)
        return
    session.emit(made, KEY_COLUMNS)
    session.note(f"API key of {whose}, shown this once:")
    click.echo(made["secret"])


@keys.command("create")
@click.argument("name")
@_DAYS
@_PROJECT
@pass_session
def create_key(session: Session, name: str, days: int, project: str | None) -> None:
    """Make an API key of your own, named NAME: for a script, a CI job or a teammate's
    tool. It has your role and scopes at most. The key is printed this once.

    \b
    Example:
      gpucloud keys create vision-ci --project vision --days 30
    """
    _show_secret(session, session.client.create_key(_key_body(name, days, None, project)), "yours")


@keys.command("revoke")
@click.argument("key_id")
@pass_session
def revoke_key(session: Session, key_id: str) -> None:
    """Revoke an API key: it stops working at once (an admin may revoke any of the
    tenant's)."""
    session.client.revoke_key(key_id)
    session.note(f"key {key_id} revoked")


@users.command("key")
@click.argument("user")
@click.option("--name", required=True, help="What the key is for, as key lists show it.")
@click.option(
    "--role", type=click.Choice(["tenant-user", "tenant-admin"]),
    help="At most the user's own role (default: it).",
)  # fmt: skip
@_DAYS
@_PROJECT
@pass_session
def mint_key(
    session: Session, user: str, name: str, role: str | None, days: int, project: str | None
) -> None:
    """Mint an API key for USER (id or email) of your tenant (tenant admin). The key is
    printed this once: hand it to them; they log in with `gpucloud login`.

    \b
    Example:
      gpucloud users key ada@acme.test --name laptop --days 30 --project vision
    """
    body = _key_body(name, days, role, project)
    _show_secret(session, session.client.mint_key(user_id_of(session, user), body), user)
