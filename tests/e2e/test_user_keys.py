"""A tenant admin mints an API key for a user of the tenant, who never signs in to get
one (issue "Tenant self-service", item 3): from the CLI, the key works as that user
with that user's role at most, the admin sees and revokes it, and it stops at once;
it dies with the user's access; nobody mints one for another tenant's user, and a
plain user mints none for others."""

from __future__ import annotations

from pathlib import Path

from .cli_support import cli_for
from .platform import Platform, assert_problem, bearer
from .support import unique


async def test_a_tenant_admin_mints_a_key_for_a_user_and_revokes_it(
    platform: Platform, tmp_path: Path
) -> None:
    account = await platform.tenant()
    admin = cli_for(tmp_path / "admin", platform)
    assert (await admin.login(account.admin_key)).code == 0
    email = f"{unique('ada')}@{account.tenant_id}.test"
    await admin.ok("users", "add", email, "--name", "Ada")

    minted = await admin.ok("users", "key", email, "--name", "laptop", "--days", "30")
    secret = minted.out.strip().splitlines()[-1]
    assert secret.startswith("gpc_"), minted
    assert "shown this once" in minted.err

    ada = cli_for(tmp_path / "ada", platform)
    assert (await ada.login(secret)).code == 0
    members = {u["email"]: u for u in (await admin.ok("-o", "json", "users", "ls")).json()}
    ada_id = members[email]["userID"]
    admin_id = next(u["userID"] for u in members.values() if u["role"] == "tenant-admin")
    me = (await ada.ok("-o", "json", "whoami")).json()
    assert (me["userID"], me["role"], me["tenantID"]) == (ada_id, "tenant-user", account.tenant_id)
    # A plain user mints no key for anyone else.
    refused = await ada.run("users", "key", admin_id, "--name", "theirs")
    assert refused.code == 1
    assert "HTTP 403" in refused.err

    # Neither more than the user's role, nor for a user of another tenant.
    higher = await platform.http.post(
        f"/v1/users/{ada_id}/api-keys", json={"name": "up", "role": "tenant-admin"},
        headers=bearer(account.admin_key),
    )  # fmt: skip
    assert_problem(higher, 403)
    stranger = await platform.tenant()
    foreign = await platform.http.post(
        f"/v1/users/{ada_id}/api-keys", json={"name": "x"}, headers=bearer(stranger.admin_key)
    )
    assert_problem(foreign, 404)

    listed = (await admin.ok("-o", "json", "keys", "ls", "--user", email)).json()
    [key] = listed
    assert (key["name"], key["role"], key["createdBy"]) == ("laptop", "tenant-user", admin_id)
    await admin.ok("keys", "revoke", key["keyID"])
    stopped = await ada.run("whoami")
    assert stopped.code == 1
    assert "HTTP 401" in stopped.err

    # A key minted for a user who is then disabled dies with their access.
    again = await admin.ok("-o", "json", "users", "key", email, "--name", "second")
    second = again.json()["secret"]
    assert (await platform.http.get("/v1/whoami", headers=bearer(second))).status_code == 200
    disabled = await platform.http.patch(
        f"/v1/users/{ada_id}", json={"status": "disabled"}, headers=bearer(account.admin_key)
    )
    assert disabled.status_code == 200, disabled.text
    gone = await platform.http.get("/v1/whoami", headers=bearer(second))
    assert gone.status_code == 401
    refused_disabled = await admin.run("users", "key", email, "--name", "third")
    assert refused_disabled.code == 1
    assert "enable them first" in refused_disabled.err


async def test_keys_an_admin_minted_for_others_end_with_that_admins_access(
    platform: Platform, tmp_path: Path
) -> None:
    """Review N6: an admin about to leave mints a key for another admin; once removed,
    that key stops too, whoever holds it."""
    account = await platform.tenant()
    root = bearer(account.admin_key)
    leaving_id, _, leaving_key = await platform.member(account, role="tenant-admin")
    other_id, _, _ = await platform.member(account, role="tenant-admin")
    minted = await platform.http.post(
        f"/v1/users/{other_id}/api-keys", json={"name": "spare"}, headers=bearer(leaving_key)
    )
    assert minted.status_code == 201, minted.text
    spare = bearer(minted.json()["secret"])
    assert (await platform.http.get("/v1/users", headers=spare)).status_code == 200
    # The other admin's own key stays: only what the leaving admin minted goes.
    own = await platform.http.post(
        f"/v1/users/{other_id}/api-keys", json={"name": "own"}, headers=root
    )
    assert own.status_code == 201, own.text

    removed = await platform.http.delete(f"/v1/users/{leaving_id}", headers=root)
    assert removed.status_code == 204, removed.text
    assert_problem(await platform.http.get("/v1/users", headers=spare), 401)
    kept = await platform.http.get("/v1/whoami", headers=bearer(own.json()["secret"]))
    assert kept.status_code == 200, kept.text
    cli = cli_for(tmp_path / "holder", platform)
    refused = await cli.login(minted.json()["secret"])
    assert refused.code == 1
