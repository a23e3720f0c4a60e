"""Storages of a project (issue "Tenant self-service", item 1's "storages belong to a
project"; decision 140): a member makes a storage in a project; the project's
members and the tenant admins see it, no one else does; a project's work takes its
own project's storages and default's, and default's work none of a project's; a key
of the project sees that project's storages and default's; a deleted project's storages fall
to `default`, so they stay in the tenant's reach; and the console makes one."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from playwright.async_api import Browser, expect

from .cli_support import Cli, cli_for
from .platform import Platform
from .projects_support import member_in_console, tenant_with_ada
from .support import eventually


async def _ids(cli: Cli) -> set[str]:
    return {s["storageID"] for s in (await cli.ok("-o", "json", "storages", "ls")).json()}


async def test_a_projects_storages_are_its_members_and_its_works(
    platform: Platform, tmp_path: Path
) -> None:
    account, admin, ada = await tenant_with_ada(platform, tmp_path)
    bob_email = f"bob@{account.tenant_id}.test"
    await admin.ok("users", "add", bob_email, "--name", "Bob")
    minted = await admin.ok("-o", "json", "users", "key", bob_email, "--name", "laptop")
    bob = cli_for(tmp_path / "bob", platform)
    assert (await bob.login(minted.json()["secret"])).code == 0
    await admin.ok("projects", "create", "vision", "--gpus", "4")
    await admin.ok("projects", "add-member", "vision", f"ada@{account.tenant_id}.test")

    async def made() -> dict[str, Any] | None:
        # The project and her membership reach the storage service with the tenant's
        # next event.
        ran = await ada.run("-o", "json", "storages", "create", "vdata", "--size", "64MiB",
                            "--project", "vision")  # fmt: skip
        return dict(ran.json()) if ran.code == 0 else None

    vdata = await eventually(made, timeout=30)
    assert vdata["project"] == "vision"
    shared = (
        await admin.ok("-o", "json", "storages", "create", "shared", "--size", "64MiB")
    ).json()
    assert shared["project"] == "default"
    assert "PROJECT" in (await ada.ok("storages", "ls")).out

    # Bob is in no project: he sees default's storages alone, and none of vision's.
    assert await _ids(bob) == {"shared"}
    hidden = await bob.run("storages", "get", "vdata")
    assert hidden.code == 1
    assert "storage 'vdata' does not exist in your projects (default)" in hidden.err
    outside = await bob.run("storages", "create", "mine", "--size", "64MiB", "--project", "vision")
    assert outside.code == 1
    assert "project 'vision' is not one of yours; you are in default" in outside.err
    assert await _ids(ada) == {"shared", "vdata"}
    assert await _ids(admin) == {"shared", "vdata"}
    volume = await ada.run("storages", "create", "vol", "--size", "1GiB", "--kind", "volume",
                           "--project", "vision")  # fmt: skip
    assert volume.code == 0, volume.err  # its claim is made in vision's namespace

    # Vision's work takes its own storage and default's; default's work not vision's.
    spec = await platform.spec()
    base = ["instances", "create", "--spec", spec, "--image", "busybox", "--no-wait"]
    refused = await ada.run(*base, "--storage", "vdata")
    assert refused.code == 1
    assert "storage 'vdata' belongs to project 'vision'" in refused.err
    started = (await ada.ok("-o", "json", *base, "--project", "vision", "--storage", "vdata",
                            "--storage", "shared")).json()  # fmt: skip
    assert started["project"] == "vision"

    # A key of vision sees vision's storages and default's, as its work takes them.
    key = (await ada.ok("-o", "json", "keys", "create", "ci", "--project", "vision")).json()
    ci = cli_for(tmp_path / "ci", platform)
    assert (await ci.login(key["secret"])).code == 0
    assert await _ids(ci) == {"vdata", "vol", "shared"}
    assert (await ci.ok("-o", "json", "storages", "get", "shared")).json()["project"] == "default"

    # Vision deleted: its storage falls to default, in everyone's reach.
    await ada.ok("instances", "stop", started["instanceID"])
    await admin.ok("projects", "rm", "vision")

    async def fallen() -> bool:
        return await _ids(bob) == {"shared", "vdata", "vol"}

    await eventually(fallen, timeout=30)


async def test_a_member_makes_a_storage_of_a_project_in_the_console(
    platform: Platform, chromium: Browser, tmp_path: Path
) -> None:
    _, admin, context, page = await member_in_console(platform, chromium, tmp_path)
    await page.get_by_role("link", name="Storages").click()
    form = page.get_by_role("form", name="Create a storage")
    await form.get_by_label("Name (id)").fill("notebooks")
    await form.get_by_label("Size (GiB)").fill("1")
    await form.get_by_role("combobox", name=re.compile("^Project")).select_option("vision")
    await form.get_by_role("button", name="Create").click()
    row = page.get_by_role("row").filter(has_text="notebooks")
    await expect(row).to_contain_text("vision")
    await context.close()
    listed = (await admin.ok("-o", "json", "storages", "ls")).json()
    assert {s["storageID"]: s["project"] for s in listed}["notebooks"] == "vision"
