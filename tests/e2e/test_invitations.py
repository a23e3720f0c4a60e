"""Invitations (issue "Tenant self-service", item 3): a tenant admin invites an email
with a role; the link, shown once, lets the person set a name and a password and
become that user, once, until it expires; an admin may revoke it. The CLI's journey
(`gpucloud invitations create`, `gpucloud join LINK`) and every refusal, each a
clear 4xx: an expired, replayed, revoked or unknown link, an email already a user,
another tenant's invitation, a plain user inviting."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pymongo import AsyncMongoClient

from .cli_support import cli_for
from .platform import Platform, assert_problem, bearer
from .support import unique

PASSWORD = "a long new password"


async def test_an_invited_person_joins_from_the_cli_once_with_the_role_given(
    platform: Platform, tmp_path: Path
) -> None:
    account = await platform.tenant()
    admin = cli_for(tmp_path / "admin", platform)
    assert (await admin.login(account.admin_key)).code == 0
    email = f"{unique('ada')}@{account.tenant_id}.test"
    made = await admin.ok("invitations", "create", email, "--role", "tenant-admin", "--days", "3")
    link = made.out.strip().splitlines()[-1]
    assert link.startswith(f"{platform.http.base_url}/join#gpi_"), made
    assert "shown this once" in made.err

    ada = cli_for(tmp_path / "ada", platform)
    joined = await ada.run("join", link, "--name", "Ada", "--password-stdin",
                           stdin=f"{PASSWORD}\n")  # fmt: skip
    assert joined.code == 0, joined
    assert f"joining Tenant {account.tenant_id} ({account.tenant_id}) as tenant-admin" in joined.err
    me = (await ada.ok("-o", "json", "whoami")).json()
    assert (me["role"], me["tenantID"]) == ("tenant-admin", account.tenant_id)
    # The password works too (the console's sign-in).
    token = await platform.http.post("/v1/tokens", json={"email": email, "password": PASSWORD})
    assert token.status_code == 201, token.text

    [shown] = (await admin.ok("-o", "json", "invitations", "ls")).json()
    assert (shown["email"], shown["status"], shown["userID"]) == (email, "accepted", me["userID"])
    # The link works once.
    again = await cli_for(tmp_path / "eve", platform).run(
        "join", link, "--name", "Eve", "--password-stdin", stdin=f"{PASSWORD}\n"
    )
    assert again.code == 1
    assert "HTTP 410" in again.err
    assert "already used" in again.err
    # An accepted invitation is not revoked: its user is removed instead.
    accepted = await admin.run("invitations", "revoke", shown["invitationID"])
    assert accepted.code == 1
    assert "remove the user instead" in accepted.err


async def test_an_expired_or_revoked_invitation_is_refused_with_why(
    platform: Platform, mongo: AsyncMongoClient[dict[str, Any]]
) -> None:
    account = await platform.tenant()
    admin = bearer(account.admin_key)

    async def invite(email: str) -> dict[str, Any]:
        made = await platform.http.post("/v1/invitations", json={"email": email}, headers=admin)
        assert made.status_code == 201, made.text
        return dict(made.json())

    def accept(token: str) -> dict[str, str]:
        return {"token": token, "name": "Someone", "password": PASSWORD}

    expiring = await invite(f"{unique('old')}@{account.tenant_id}.test")
    # Its week has passed (the stored expiry moved back, as time would have).
    await mongo["gpucloud_gateway"]["invitations"].update_one(
        {"_id": expiring["invitation"]["invitationID"]},
        {"$set": {"expires_at": datetime.now(UTC) - timedelta(minutes=1)}},
    )
    late = await platform.http.post("/v1/invitations/accept", json=accept(expiring["token"]))
    assert_problem(late, 410)
    assert "expired" in late.json()["detail"]

    revoked = await invite(f"{unique('gone')}@{account.tenant_id}.test")
    stranger = await platform.tenant()
    path = f"/v1/invitations/{revoked['invitation']['invitationID']}"
    assert_problem(await platform.http.delete(path, headers=bearer(stranger.admin_key)), 404)
    assert (await platform.http.delete(path, headers=admin)).status_code == 204
    preview = await platform.http.post("/v1/invitations/preview", json={"token": revoked["token"]})
    assert_problem(preview, 410)
    assert "revoked" in preview.json()["detail"]

    listed = (await platform.http.get("/v1/invitations", headers=admin)).json()
    assert {i["invitationID"]: i["status"] for i in listed} == {
        expiring["invitation"]["invitationID"]: "expired",
        revoked["invitation"]["invitationID"]: "revoked",
    }
    unknown = await platform.http.post("/v1/invitations/accept", json=accept("gpi_" + "x" * 43))
    assert_problem(unknown, 404)
    # An email that is a user already is not invited; a plain user invites nobody.
    taken = await platform.http.post(
        "/v1/invitations", json={"email": f"admin@{account.tenant_id}.test"}, headers=admin
    )
    assert_problem(taken, 409)
    _, _, member_key = await platform.member(account)
    plain = await platform.http.post(
        "/v1/invitations", json={"email": f"{unique('x')}@x.test"}, headers=bearer(member_key)
    )
    assert_problem(plain, 403)
    # A short password is refused on its field, and the link still works after.
    fresh = await invite(f"{unique('new')}@{account.tenant_id}.test")
    weak = await platform.http.post(
        "/v1/invitations/accept", json={**accept(fresh["token"]), "password": "short"}
    )
    assert_problem(weak, 422)
    ok = await platform.http.post("/v1/invitations/accept", json=accept(fresh["token"]))
    assert ok.status_code == 201, ok.text
