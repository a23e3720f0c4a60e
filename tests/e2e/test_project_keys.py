"""Keys of a project (issue "Tenant self-service", item 1's "keys belong to a project";
decision 139): a key made for one project starts its work there without naming it,
names no other project, lists and reaches that project's work alone, makes keys of
that project only, gets kubectl for that project's namespace alone, and stops
working when its user leaves the project. A user not in
a project gets no key of it, and the console makes one."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from playwright.async_api import Browser, expect

from .cli_support import Cli, cli_for
from .platform import Platform
from .projects_support import member_in_console, tenant_with_ada
from .support import eventually


async def _key_cli(
    platform: Platform, cli: Cli, tmp_path: Path, *args: str
) -> tuple[dict[str, Any], Cli]:
    """A key `cli` makes (`keys create` with `args`), and a CLI logged in with it."""
    made = (await cli.ok("-o", "json", "keys", "create", *args)).json()
    keyed = cli_for(tmp_path / made["keyID"], platform)
    assert (await keyed.login(made["secret"])).code == 0
    return made, keyed


async def test_a_project_key_acts_in_its_project_alone_while_its_user_is_in_it(
    platform: Platform, tmp_path: Path
) -> None:
    account, admin, ada = await tenant_with_ada(platform, tmp_path)
    ada_email = f"ada@{account.tenant_id}.test"
    await admin.ok("projects", "create", "vision", "--gpus", "4")
    await admin.ok("projects", "add-member", "vision", ada_email)
    spec = await platform.spec()
    mine = (await ada.ok("-o", "json", "instances", "create", "--spec", spec, "--image",
                         "busybox", "--no-wait")).json()  # fmt: skip
    assert mine["project"] == "default"

    key, ci = await _key_cli(
        platform, ada, tmp_path, "vision-ci", "--project", "vision", "--days", "7"
    )
    assert key["project"] == "vision"

    async def started() -> dict[str, Any] | None:
        # Her membership reaches the instances service with the tenant's next event.
        ran = await ci.run("-o", "json", "instances", "create", "--spec", spec, "--image",
                           "busybox", "--no-wait")  # fmt: skip
        return dict(ran.json()) if ran.code == 0 else None

    ran = await eventually(started, timeout=30)
    assert ran["project"] == "vision"  # named nowhere: the key's project

    elsewhere = await ci.run("instances", "create", "--spec", spec, "--image", "busybox",
                             "--project", "default", "--no-wait")  # fmt: skip
    assert elsewhere.code == 1
    assert "this credential is for project 'vision'" in elsewhere.err
    listed = {i["instanceID"] for i in (await ci.ok("-o", "json", "instances", "ls")).json()}
    assert ran["instanceID"] in listed
    assert mine["instanceID"] not in listed
    # GPU telemetry names no project: a project key reads none of it.
    metrics = await ci.run("instances", "metrics", ran["instanceID"])
    assert metrics.code == 1
    assert "a key of one project reads none of them" in metrics.err
    hidden = await ci.run("instances", "get", mine["instanceID"])
    assert hidden.code == 1
    assert f"instance {mine['instanceID']!r} does not exist" in hidden.err
    assert (await ci.run("instances", "stop", mine["instanceID"])).code == 1
    # Her own key sees both, and filters by project when asked.
    both = {i["instanceID"] for i in (await ada.ok("-o", "json", "instances", "ls")).json()}
    assert {ran["instanceID"], mine["instanceID"]} <= both
    vision = (await ada.ok("-o", "json", "instances", "ls", "--project", "vision")).json()
    assert [i["instanceID"] for i in vision] == [ran["instanceID"]]
    projects = (await ci.ok("-o", "json", "projects", "ls")).json()
    assert [p["projectID"] for p in projects] == ["vision"]
    # Its kubectl credential is for its project's namespace, and no other.
    issued = await ci.ok("kubeconfig", "--file", str(tmp_path / "ci.yaml"))
    assert f"namespace gpc-{account.tenant_id}--vision (project vision)" in issued.err
    other = await ci.run("kubeconfig", "--project", "default")
    assert other.code == 1
    assert "this credential is for project 'vision'" in other.err
    # Its keys are of its project too.
    widened = await ci.run("keys", "create", "wider", "--project", "default")
    assert widened.code == 1
    assert "this credential is for project 'vision'" in widened.err
    narrow = (await ci.ok("-o", "json", "keys", "create", "narrow")).json()
    assert narrow["project"] == "vision"

    await ci.ok("instances", "stop", ran["instanceID"])
    await ada.ok("instances", "stop", mine["instanceID"])
    await admin.ok("projects", "remove-member", "vision", ada_email)

    async def ended() -> bool:
        gone = await ci.run("instances", "ls")
        return gone.code != 0 and "which its user is no longer in" in gone.err

    await eventually(ended, timeout=15)
    assert (await ada.run("instances", "ls")).code == 0  # her own key goes on


async def test_no_key_of_a_project_for_one_not_in_it(platform: Platform, tmp_path: Path) -> None:
    """Not for the user herself, nor minted by an admin for her, nor an admin's own
    until they join the project; and a key of one project administers nothing: it is
    a tenant-user key, whoever holds it."""
    account, admin, ada = await tenant_with_ada(platform, tmp_path)
    ada_email = f"ada@{account.tenant_id}.test"
    await admin.ok("projects", "create", "vision", "--gpus", "2")
    hers = await ada.run("keys", "create", "ci", "--project", "vision")
    assert hers.code == 1
    assert "project 'vision' is not one of yours; you are in default" in hers.err
    minted = await admin.run("users", "key", ada_email, "--name", "ci", "--project", "vision")
    assert minted.code == 1
    assert "the key's user is not a member of project 'vision'" in minted.err
    unknown = await admin.run("keys", "create", "ci", "--project", "no-such")
    assert unknown.code == 1
    assert "project 'no-such' does not exist" in unknown.err
    outside = await admin.run("keys", "create", "ci", "--project", "vision")
    assert outside.code == 1  # an admin of every project, a member of none yet
    assert "you are not a member of project 'vision'" in outside.err
    whoami = (await admin.ok("-o", "json", "whoami")).json()
    await admin.ok("projects", "add-member", "vision", whoami["userID"])
    admins = (await admin.ok("-o", "json", "keys", "create", "ci", "--project", "vision")).json()
    assert (admins["project"], admins["role"]) == ("vision", "tenant-user")
    listed = (await admin.ok("-o", "json", "keys", "ls")).json()
    assert {k["keyID"]: k["project"] for k in listed}[admins["keyID"]] == "vision"
    keyed = cli_for(tmp_path / "admins-ci", platform)
    assert (await keyed.login(admins["secret"])).code == 0
    refused = await keyed.run("projects", "create", "nlp", "--gpus", "1")
    assert refused.code == 1
    assert "this action needs one of the roles: tenant-admin" in refused.err


async def test_a_user_makes_a_key_of_a_project_in_the_console(
    platform: Platform, chromium: Browser, tmp_path: Path
) -> None:
    _, _, context, page = await member_in_console(platform, chromium, tmp_path)
    await page.get_by_role("link", name="Admin").click()
    keys = page.get_by_role("region", name="API keys")
    await keys.get_by_label("Key name").fill("vision-notebook")
    await keys.get_by_role("combobox", name=re.compile("^Project")).select_option("vision")
    await keys.get_by_role("button", name="New API key").click()
    secret = (await keys.get_by_test_id("secret").inner_text()).strip()
    assert secret.startswith("gpc_")
    row = keys.get_by_role("row").filter(has_text="vision-notebook")
    await expect(row).to_contain_text("vision")
    await context.close()
    keyed = cli_for(tmp_path / "notebook", platform)
    assert (await keyed.login(secret)).code == 0
    shown = (await keyed.ok("-o", "json", "projects", "ls")).json()
    assert [p["projectID"] for p in shown] == ["vision"]
