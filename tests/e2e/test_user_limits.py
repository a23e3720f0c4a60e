"""A tenant admin's limits on one user (issue "Tenant self-service", item 2): GPUs at
once and spend per month, enforced when the user's workloads are admitted. From the
CLI: a user at their own GPU limit is refused while another user of the tenant is
admitted, their queued work waits for `user_limit` and goes once their GPUs come
back; a user whose spend reached their limit is stopped and refused until the limit
is raised, and the tenant's other users are not touched."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .cli_support import Cli, cli_for
from .platform import Platform, TenantAccount, assert_problem, bearer
from .support import eventually


async def _people(platform: Platform, tmp_path: Path) -> tuple[TenantAccount, Cli, Cli, Cli]:
    """A tenant with users Ada and Bob, each logged in with a key their admin minted;
    the admin's, Ada's and Bob's CLIs."""
    account = await platform.tenant(max_gpus=8)
    admin = cli_for(tmp_path / "admin", platform)
    assert (await admin.login(account.admin_key)).code == 0
    clis = [admin]
    for name in ("ada", "bob"):
        email = f"{name}@{account.tenant_id}.test"
        await admin.ok("users", "add", email, "--name", name.title())
        minted = await admin.ok("-o", "json", "users", "key", email, "--name", "laptop")
        person = cli_for(tmp_path / name, platform)
        assert (await person.login(minted.json()["secret"])).code == 0
        clis.append(person)
    return account, clis[0], clis[1], clis[2]


async def _quota_says(cli: Cli, field: str, value: Any) -> dict[str, Any] | None:
    """The caller's quota once the instances service shows `field` at `value` (the
    tenant's event carrying the limits has arrived)."""
    shown = await cli.run("-o", "json", "quota")
    if shown.code != 0:
        return None  # the tenant's first event may not be there yet
    quota: dict[str, Any] = shown.json()
    return quota if quota.get(field) == value else None


async def _state(cli: Cli, instance_id: str) -> dict[str, Any]:
    return dict((await cli.ok("-o", "json", "instances", "get", instance_id)).json())


async def test_a_user_at_their_own_gpu_limit_waits_while_another_user_is_admitted(
    platform: Platform, tmp_path: Path
) -> None:
    account, admin, ada, bob = await _people(platform, tmp_path)
    spec = await platform.spec()
    set_limits = await admin.ok("users", "limits", f"ada@{account.tenant_id}.test", "--gpus", "1")
    assert "MAX GPUS" in set_limits.out
    await eventually(lambda: _quota_says(ada, "yourMaxGpus", 1), timeout=30)

    first = (await ada.ok("-o", "json", "instances", "create", "--spec", spec,
                          "--image", "busybox")).json()  # fmt: skip
    refused = await ada.run("instances", "create", "--spec", spec, "--image", "busybox")
    assert refused.code == 1
    assert "your own limit is 1 GPUs at once; you hold 1 and asked for 1" in refused.err
    # Bob, of the same tenant and with room in its quota, is admitted meanwhile.
    await bob.ok("instances", "create", "--spec", spec, "--image", "busybox")
    assert (await ada.ok("-o", "json", "quota")).json()["yourGpusInUse"] == 1

    # Ada's queued start waits for her own limit, not the tenant's quota ...
    queued = (await ada.ok("-o", "json", "instances", "create", "--spec", spec,
                           "--image", "busybox", "--queue", "--no-wait")).json()  # fmt: skip

    async def waits_for_her_limit() -> bool:
        place = (await _state(ada, queued["instanceID"])).get("queue") or {}
        return place.get("reason") == "user_limit"

    await eventually(waits_for_her_limit, timeout=30)
    # ... and is admitted once her first instance gives its GPU back.
    await ada.ok("instances", "stop", first["instanceID"])

    async def admitted() -> bool:
        return bool((await _state(ada, queued["instanceID"]))["state"] != "queued")

    await eventually(admitted, timeout=60)


async def test_a_users_limits_are_the_tenant_admins_to_set_within_the_tenants_quota(
    platform: Platform, tmp_path: Path
) -> None:
    account, admin, ada, _ = await _people(platform, tmp_path)
    email = f"ada@{account.tenant_id}.test"
    above = await admin.run("users", "limits", email, "--gpus", "9")
    assert above.code == 1
    assert "maxGpus 9 is above the tenant's 8" in above.err
    # A plain user sets none, not even their own.
    own = await ada.run("users", "limits", email, "--gpus", "8")
    assert own.code == 1
    assert "HTTP 403" in own.err
    # Another tenant's admin finds no such user.
    users = (await admin.ok("-o", "json", "users", "ls")).json()
    ada_id = next(u["userID"] for u in users if u["email"] == email)
    stranger = await platform.tenant()
    for method in ("GET", "PUT"):
        foreign = await platform.http.request(
            method, f"/v1/users/{ada_id}/limits", json={"maxGpus": 1},
            headers=bearer(stranger.admin_key),
        )  # fmt: skip
        assert_problem(foreign, 404)
    # Set, shown on the tenant, then taken off with --clear.
    await admin.ok("users", "limits", email, "--gpus", "2", "--monthly-spend-cents", "700")
    tenant = await platform.http.get("/v1/tenant", headers=bearer(account.admin_key))
    assert tenant.json()["userLimits"] == {ada_id: {"maxGpus": 2, "monthlySpendCents": 700}}
    # A user sees their own limits on the tenant, no one else's (review L4).
    await admin.ok("users", "limits", f"bob@{account.tenant_id}.test", "--gpus", "1")
    key = (await admin.ok("-o", "json", "users", "key", email, "--name", "read")).json()
    hers = await platform.http.get("/v1/tenant", headers=bearer(key["secret"]))
    assert hers.json()["userLimits"] == {ada_id: {"maxGpus": 2, "monthlySpendCents": 700}}
    await admin.ok("users", "limits", f"bob@{account.tenant_id}.test", "--clear")
    cleared = (await admin.ok("-o", "json", "users", "limits", email, "--clear")).json()
    assert cleared == {"maxGpus": None, "monthlySpendCents": None}
    tenant = await platform.http.get("/v1/tenant", headers=bearer(account.admin_key))
    assert tenant.json()["userLimits"] == {}


async def test_a_user_whose_spend_reached_their_limit_is_stopped_and_refused_until_raised(
    platform: Platform, tmp_path: Path
) -> None:
    account, admin, ada, bob = await _people(platform, tmp_path)
    spec = await platform.spec()
    # 3,600 a GPU-hour: one currency unit (100 cents) a GPU-second.
    price = await platform.http.post(
        "/v1/prices", json={"meter": "gpu_hour", "specName": spec, "amount": "3600"},
        headers=platform.admin,
    )  # fmt: skip
    assert price.status_code == 201, price.text
    email = f"ada@{account.tenant_id}.test"
    await admin.ok("users", "limits", email, "--monthly-spend-cents", "300")
    await eventually(lambda: _quota_says(ada, "yourMonthlySpendCents", 300), timeout=30)

    create = ("-o", "json", "instances", "create", "--spec", spec, "--image", "busybox")
    hers = (await ada.ok(*create)).json()
    his = (await bob.ok(*create)).json()

    async def stopped() -> bool:
        return (await _state(ada, hers["instanceID"]))["state"] in {"stopping", "stopped"}

    # Three seconds of her GPU reach 300 cents; the next budget round stops her.
    await eventually(stopped, timeout=60, interval=1)
    refused = await ada.run(*create)
    assert refused.code == 1
    assert "your spend this month reached your limit of 300 cents" in refused.err
    # Bob's instance runs on, and he may start more.
    assert (await _state(bob, his["instanceID"]))["state"] in {"pending", "starting", "running"}
    await bob.ok(*create)

    # Raised, the limit lets her start again.
    await admin.ok("users", "limits", email, "--monthly-spend-cents", "100000000")

    async def starts_again() -> bool:
        return (await ada.run(*create)).code == 0

    await eventually(starts_again, timeout=30, interval=1)
