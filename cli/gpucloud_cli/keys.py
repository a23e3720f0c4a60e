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
@click.option(
    "--days", type=click.IntRange(1, 366), default=90, show_default=True,
    help="How long it works.",
)  # fmt: skip
@pass_session
def mint_key(session: Session, user: str, name: str, role: str | None, days: int) -> None:
    """Mint an API key for USER (id or email) of your tenant (tenant admin). The key is
    printed this once: hand it to them; they log in with `gpucloud login`.

    \b
    Example:
      gpucloud users key ada@acme.test --name laptop --days 30
    """
    body: dict[str, Any] = {
        "name": name, "expiresAt": (datetime.now(UTC) + timedelta(days=days)).isoformat(),
    }  # fmt: skip
    if role is not None:
        body["role"] = role
    made = session.client.mint_key(user_id_of(session, user), body)
    if session.output == "json":
        session.emit_json(made)
        return
    session.emit(made, KEY_COLUMNS)
    session.note(f"API key of {user}, shown this once:")
    click.echo(made["secret"])
