"""Projects of a tenant (issue "Tenant self-service", item 1; decision 138), first
slice: a tenant admin makes projects from the CLI, each with a share of the
tenant's GPUs and a budget, and names their members; the shares together never
exceed the tenant's GPUs (a 422 saying so); `default` holds the rest and everyone;
a user sees `default` and their own projects, and no other; another tenant sees
none; a removed user leaves their projects; and the console's Projects card makes
one and adds a member."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from playwright.async_api import Browser, expect

from gpucloud_libs.kafka_connection import KafkaConnection
from gpucloud_libs.topics import BILLING_ALERTS
from gpucloud_stack import layout

from .cli_support import cli_for
from .platform import Platform, assert_problem, bearer
from .projects_support import started_in_vision, tenant_with_ada
from .support import eventually, read_topic, sign_in_with_key


async def test_an_admin_carves_projects_from_the_tenants_gpus_and_names_their_members(
    platform: Platform, tmp_path: Path
) -> None:
    account, admin, ada = await tenant_with_ada(platform, tmp_path)
    made = await admin.ok(
        "-o", "json", "projects", "create", "vision", "--gpus", "6",
        "--monthly-budget-cents", "500000",
    )  # fmt: skip
    assert (made.json()["maxGpus"], made.json()["members"]) == (6, [])
    await admin.ok("projects", "create", "nlp", "--gpus", "4")
    over = await admin.run("projects", "create", "speech", "--gpus", "8")
    assert over.code == 1
    assert "the projects' GPU shares would come to 18, above the tenant's 16" in over.err
    taken = await admin.run("projects", "create", "vision")
    assert taken.code == 1
    assert "exists" in taken.err

    shown = {p["projectID"]: p for p in (await admin.ok("-o", "json", "projects", "ls")).json()}
    assert list(shown) == ["default", "nlp", "vision"]
    assert (shown["default"]["maxGpus"], shown["default"]["everyone"]) == (6, True)
    table = await admin.ok("projects", "ls")
    assert "everyone" in table.out

    await admin.ok("projects", "add-member", "vision", f"ada@{account.tenant_id}.test")
    mine = [p["projectID"] for p in (await ada.ok("-o", "json", "projects", "ls")).json()]
    assert mine == ["default", "vision"]
    hidden = await ada.run("projects", "show", "nlp")
    assert hidden.code == 1
    assert "project 'nlp' is not one of yours; you are in default, vision" in hidden.err
    refused = await ada.run("projects", "create", "mine")
    assert refused.code == 1

    # A share changed within the tenant's, then a project removed: default grows back.
    await admin.ok("projects", "set", "vision", "--gpus", "8")
    await admin.ok("projects", "rm", "nlp")
    shown = {p["projectID"]: p for p in (await admin.ok("-o", "json", "projects", "ls")).json()}
    assert (list(shown), shown["default"]["maxGpus"]) == (["default", "vision"], 8)

    # The admin's own quota may not fall below the projects' shares; above them, default
    # gets what is left, and `none` follows the platform's limit again.
    below = await admin.run("quota", "set", "--gpus", "6")
    assert below.code == 1
    assert "the projects' GPU shares come to 8, above 6; lower them first" in below.err
    tightened = await admin.ok("quota", "set", "--gpus", "12", "--instances", "5")
    assert "enforced" in tightened.out
    shown = {p["projectID"]: p for p in (await admin.ok("-o", "json", "projects", "ls")).json()}
    assert shown["default"]["maxGpus"] == 4
    followed = await admin.ok("-o", "json", "quota", "set", "--gpus", "none")
    assert (followed.json()["quota"]["maxGpus"], followed.json()["quota"]["maxInstances"]) == (
        16,
        5,
    )

    # Ada, removed, leaves the project.
    await admin.ok("users", "rm", f"ada@{account.tenant_id}.test")
    assert (await admin.ok("-o", "json", "projects", "show", "vision")).json()["members"] == []


async def test_another_tenant_sees_no_project_and_a_project_takes_only_the_tenants_users(
    platform: Platform, tmp_path: Path
) -> None:
    account, admin, _ = await tenant_with_ada(platform, tmp_path)
    await admin.ok("projects", "create", "vision", "--gpus", "2")
    other = await platform.tenant()
    theirs = bearer(other.admin_key)
    assert_problem(await platform.http.get("/v1/projects/vision", headers=theirs), 404)
    listed = await platform.http.get("/v1/projects", headers=theirs)
    assert [p["projectID"] for p in listed.json()] == ["default"]
    # A user of the other tenant is not one of ours to add.
    stranger = await platform.http.put(
        f"/v1/projects/vision/members/{other.admin_user_id}", headers=bearer(account.admin_key)
    )
    assert_problem(stranger, 404)


async def test_an_admin_makes_a_project_and_adds_a_member_in_the_console(
    platform: Platform, chromium: Browser, tmp_path: Path
) -> None:
    account, admin, ada = await tenant_with_ada(platform, tmp_path)
    context = await chromium.new_context(base_url=str(platform.http.base_url))
    page = await context.new_page()
    await sign_in_with_key(page, account.admin_key)
    await page.get_by_role("link", name="Admin").click()
    card = page.get_by_role("region", name="Projects")
    await card.get_by_label("Project ID").fill("vision")
    await card.get_by_label("GPU share").fill("6")
    await card.get_by_role("button", name="Make project").click()
    vision = card.get_by_role("row").filter(has_text="vision")
    await expect(vision).to_contain_text("none yet")
    await expect(card.get_by_role("row").filter(has_text="default")).to_contain_text("10")
    await card.get_by_role("combobox", name=re.compile("^Project")).select_option("vision")
    await card.get_by_role("combobox", name=re.compile("^Member")).select_option(
        label=f"ada@{account.tenant_id}.test"
    )
    await card.get_by_role("button", name="Add member").click()
    await expect(vision).to_contain_text(f"ada@{account.tenant_id}.test")

    # The tenant's own quota: not below vision's share of 6, and then within it.
    quota = page.get_by_role("region", name="Tenant quota")
    await quota.get_by_label("Max GPUs").fill("4")
    await quota.get_by_role("button", name="Set quota").click()
    await expect(quota.get_by_role("alert")).to_contain_text("the projects' GPU shares come to 6")
    await quota.get_by_label("Max GPUs").fill("12")
    await quota.get_by_role("button", name="Set quota").click()
    await expect(quota.get_by_role("row").filter(has_text="Enforced")).to_contain_text("12")
    await context.close()
    mine = [p["projectID"] for p in (await ada.ok("-o", "json", "projects", "ls")).json()]
    assert mine == ["default", "vision"]

    # Ada, a member now, starts an instance in vision from her own console.
    spec = await platform.spec()
    key = await admin.ok("-o", "json", "users", "key", f"ada@{account.tenant_id}.test",
                         "--name", "console")  # fmt: skip
    context = await chromium.new_context(base_url=str(platform.http.base_url))
    page = await context.new_page()
    await sign_in_with_key(page, key.json()["secret"])
    await page.get_by_label("Template").select_option("jupyter")
    await page.get_by_label("Spec").select_option(spec)
    await page.get_by_role("combobox", name=re.compile("^Project")).select_option("vision")
    await page.get_by_role("button", name="Start", exact=True).click()
    row = page.get_by_role("row").filter(has_text=spec)
    await expect(row).to_contain_text("vision")
    # Beside the start forms, where each of her projects stands.
    await expect(page.get_by_test_id("quota").first).to_contain_text("vision 1 of 6")
    await context.close()
    started = (await ada.ok("-o", "json", "instances", "ls")).json()
    assert [(i["specName"], i["project"]) for i in started] == [(spec, "vision")]
    await ada.ok("instances", "stop", started[0]["instanceID"])


async def test_a_member_starts_work_in_a_project_and_no_one_else_does(
    platform: Platform, tmp_path: Path
) -> None:
    """Slice 2's start: an instance is started in a project its member names, and
    says so; a user who is not a member is told the project does not exist."""
    account, admin, ada = await tenant_with_ada(platform, tmp_path)
    await admin.ok("projects", "create", "vision", "--gpus", "4")
    await admin.ok("projects", "add-member", "vision", f"ada@{account.tenant_id}.test")
    spec = await platform.spec()
    outsider = await admin.ok("users", "add", f"bob@{account.tenant_id}.test", "--name", "Bob")
    assert outsider.code == 0
    minted = await admin.ok("-o", "json", "users", "key", f"bob@{account.tenant_id}.test",
                            "--name", "laptop")  # fmt: skip
    bob = cli_for(tmp_path / "bob", platform)
    assert (await bob.login(minted.json()["secret"])).code == 0

    made = await started_in_vision(ada, spec)
    assert made["project"] == "vision"
    await ada.ok("instances", "stop", made["instanceID"])
    # Out of the project, she cannot start her stopped instance there again.
    await admin.ok("projects", "remove-member", "vision", f"ada@{account.tenant_id}.test")

    async def removal_known() -> bool:
        # The removal travels to the instances service with the tenant's next event: a
        # start naming vision (and no spec, so nothing starts) is then refused for it.
        ran = await ada.run("instances", "create", "--spec", "no-such-spec", "--image",
                            "busybox", "--project", "vision", "--no-wait")  # fmt: skip
        return "project 'vision' is not one of yours; you are in default" in ran.err

    await eventually(removal_known, timeout=30)
    again = await ada.run("instances", "start", made["instanceID"])
    assert again.code == 1
    # Nor does she see it now: the project's work is its members'.
    assert f"instance {made['instanceID']!r} does not exist in your projects" in again.err
    refused = await bob.run("instances", "create", "--spec", spec, "--image", "busybox",
                            "--project", "vision", "--no-wait")  # fmt: skip
    assert refused.code == 1
    assert "project 'vision' is not one of yours; you are in default" in refused.err
    plain = (await bob.ok("-o", "json", "instances", "create", "--spec", spec, "--image",
                          "busybox", "--no-wait")).json()  # fmt: skip
    assert plain["project"] == "default"
    await bob.ok("instances", "stop", plain["instanceID"])


async def test_two_projects_keep_to_their_shares_queues_and_usage(
    platform: Platform, chromium: Browser, tmp_path: Path
) -> None:
    """Vision has 2 of the tenant's 16 GPUs: a second start there is refused while
    default still starts; a job there waits for `project_quota` until vision's
    instance stops; usage reads by project, and so do this month's invoice lines, in
    the CLI and the console."""
    account, admin, ada = await tenant_with_ada(platform, tmp_path)
    await admin.ok("projects", "create", "vision", "--gpus", "2")
    await admin.ok("projects", "add-member", "vision", f"ada@{account.tenant_id}.test")
    spec = await platform.spec(gpus=2)

    first = await started_in_vision(ada, spec)
    refused = await ada.run("instances", "create", "--spec", spec, "--image", "busybox",
                            "--project", "vision", "--no-wait")  # fmt: skip
    assert refused.code == 1
    assert "project 'vision' may hold 2 GPUs; it holds 2 and asked for 2" in refused.err
    other = (await ada.ok("-o", "json", "instances", "create", "--spec", spec, "--image",
                          "busybox", "--no-wait")).json()  # fmt: skip
    assert other["project"] == "default"
    # Her quota says where each of her projects stands.
    quota = (await ada.ok("-o", "json", "quota")).json()
    assert [(p["project"], p["maxGpus"], p["gpusInUse"]) for p in quota["projects"]] == [
        ("default", 14, 2), ("vision", 2, 2),
    ]  # fmt: skip
    assert "your projects" in (await ada.ok("quota")).out

    job_file = tmp_path / "job.yaml"
    job_file.write_text(
        f"image: busybox\nspecName: {spec}\ncommand: [python, train.py]\n"
        "env:\n  - {name: GPUCLOUD_SIM_RUN_FOR, value: 1s}\n"
    )
    await ada.ok("jobs", "submit", str(job_file), "--id", "vision-1", "--project", "vision",
                 "--detach")  # fmt: skip

    async def waiting() -> dict[str, Any] | None:
        job = (await ada.ok("-o", "json", "jobs", "get", "vision-1")).json()
        return job if (job.get("queue") or {}).get("reason") == "project_quota" else None

    assert (await eventually(waiting, timeout=30))["project"] == "vision"
    await ada.ok("instances", "stop", first["instanceID"])

    async def succeeded() -> bool:
        job = (await ada.ok("-o", "json", "jobs", "get", "vision-1")).json()
        return bool(job["state"] == "succeeded")

    await eventually(succeeded, timeout=60)
    await ada.ok("instances", "stop", other["instanceID"])

    async def by_project() -> dict[str, Any] | None:
        report = (await admin.ok("-o", "json", "usage", "--group-by", "project")).json()
        rows = {row["key"]: row for row in report["rows"]}
        return rows if set(rows) == {"default", "vision"} else None

    rows = await eventually(by_project, timeout=30)
    assert all(row["gpuMicroseconds"] > 0 for row in rows.values())
    vision = (await admin.ok("-o", "json", "usage", "--project", "vision")).json()
    # Vision's instance and its job's run; default's instance is not among them.
    assert other["instanceID"] not in {row["key"] for row in vision["rows"]}
    assert first["instanceID"] in {row["key"] for row in vision["rows"]}
    table = await admin.ok("usage", "--project", "vision")
    assert "project vision" in table.out + table.err

    # This month's invoice so far: a GPU line per project (and spec, and price).
    lines = (await admin.ok("-o", "json", "invoices", "show")).json()["lines"]
    assert [(line["project"], line["description"]) for line in lines] == [
        ("default", f"{spec}: GPU-hours"), ("vision", f"{spec}: GPU-hours, project vision"),
    ]  # fmt: skip
    shown = await admin.ok("invoices", "show")
    assert f"{spec}: GPU-hours, project vision" in shown.out
    context = await chromium.new_context(base_url=str(platform.http.base_url))
    page = await context.new_page()
    await sign_in_with_key(page, account.admin_key)
    await page.get_by_role("link", name="Usage and costs").click()
    card = page.get_by_role("region", name="Invoice lines")
    vision_line = card.get_by_role("row").filter(has_text="project vision")
    await expect(vision_line).to_contain_text("vision")
    await expect(card.get_by_role("row").filter(has_text="default")).to_contain_text(spec)
    await context.close()


async def test_a_project_that_spent_its_budget_is_stopped_and_refused_until_raised(
    platform: Platform, tmp_path: Path, kafka: KafkaConnection
) -> None:
    account, admin, ada = await tenant_with_ada(platform, tmp_path)
    spec = await platform.spec()
    # 3,600 a GPU-hour: one currency unit (100 cents) a GPU-second.
    price = await platform.http.post(
        "/v1/prices", json={"meter": "gpu_hour", "specName": spec, "amount": "3600"},
        headers=platform.admin,
    )  # fmt: skip
    assert price.status_code == 201, price.text
    await admin.ok("projects", "create", "vision", "--monthly-budget-cents", "300")
    await admin.ok("projects", "add-member", "vision", f"ada@{account.tenant_id}.test")
    create = ("-o", "json", "instances", "create", "--spec", spec, "--image", "busybox")

    vision = await started_in_vision(ada, spec)
    plain = (await ada.ok(*create)).json()

    async def state(instance_id: str) -> str:
        return str((await ada.ok("-o", "json", "instances", "get", instance_id)).json()["state"])

    async def stopped() -> bool:
        return await state(vision["instanceID"]) in {"stopping", "stopped"}

    # Three seconds of its GPU reach 300 cents; the next budget round stops its work.
    await eventually(stopped, timeout=60, interval=1)
    refused = await ada.run(*create, "--project", "vision")
    assert refused.code == 1
    assert "project 'vision' spent its budget of 300 cents this month" in refused.err
    # Default's instance runs on.
    assert await state(plain["instanceID"]) in {"pending", "scheduled", "ready", "running"}
    await ada.ok("instances", "stop", plain["instanceID"])
    # The project's billing alerts: each threshold of its budget once, naming it.
    alerts = await read_topic(kafka, BILLING_ALERTS.name, expect=100_000, timeout=3)
    mine = [json.loads(r.value) for r in alerts if r.key == account.tenant_id.encode()]
    assert sorted((a["project"], a["threshold_pct"], a["budget_cents"]) for a in mine) == [
        ("vision", 50, 300), ("vision", 80, 300), ("vision", 100, 300),
    ]  # fmt: skip

    # Raised, the budget lets the project start again.
    await admin.ok("projects", "set", "vision", "--monthly-budget-cents", "100000000")
    again = await started_in_vision(ada, spec)
    await ada.ok("instances", "stop", again["instanceID"])


async def test_an_invitation_names_projects_and_its_acceptance_joins_them(
    platform: Platform, tmp_path: Path
) -> None:
    account = await platform.tenant()
    admin = cli_for(tmp_path / "admin", platform)
    assert (await admin.login(account.admin_key)).code == 0
    await admin.ok("projects", "create", "vision", "--gpus", "2")
    email = f"grace@{account.tenant_id}.test"
    unknown = await admin.run("invitations", "create", email, "--project", "nlp")
    assert unknown.code == 1
    assert "project 'nlp' does not exist" in unknown.err
    made = await admin.ok("invitations", "create", email, "--project", "vision",
                          "--project", "default")  # fmt: skip
    link = made.out.strip().splitlines()[-1]
    [shown] = (await admin.ok("-o", "json", "invitations", "ls")).json()
    assert shown["projects"] == ["vision"]  # everyone is in default already

    grace = cli_for(tmp_path / "grace", platform)
    joined = await grace.run("join", link, "--name", "Grace", "--password-stdin",
                             stdin="a long new password\n")  # fmt: skip
    assert joined.code == 0, joined
    assert "in projects vision" in joined.err
    mine = [p["projectID"] for p in (await grace.ok("-o", "json", "projects", "ls")).json()]
    assert mine == ["default", "vision"]


async def test_a_new_leader_keeps_a_queued_job_in_its_project(
    platform: Platform, tmp_path: Path
) -> None:
    """The instances service killed while a job of vision waits for vision's share:
    the leader after it reads the queued job with its project (and its user), so the
    job still waits for `project_quota`, and runs once vision's GPUs come back."""
    account, admin, ada = await tenant_with_ada(platform, tmp_path)
    await admin.ok("projects", "create", "vision", "--gpus", "2")
    await admin.ok("projects", "add-member", "vision", f"ada@{account.tenant_id}.test")
    spec = await platform.spec(gpus=2)

    holder = await started_in_vision(ada, spec)
    job_file = tmp_path / "job.yaml"
    job_file.write_text(f"image: busybox\nspecName: {spec}\nproject: vision\n"
                        "env:\n  - {name: GPUCLOUD_SIM_RUN_FOR, value: 1s}\n")  # fmt: skip
    await ada.ok("jobs", "submit", str(job_file), "--id", "waits-1", "--detach")

    async def reason() -> str | None:
        job = (await ada.ok("-o", "json", "jobs", "get", "waits-1")).json()
        return (job.get("queue") or {}).get("reason")

    async def waiting() -> bool:
        return await reason() == "project_quota"

    await eventually(waiting, timeout=30)
    os.kill(int(layout.pid_file("instances").read_text()), signal.SIGKILL)
    restart = await asyncio.to_thread(
        subprocess.run, [sys.executable, str(layout.LOCAL_DIR / "stack.py"), "up"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert restart.returncode == 0, restart.stderr
    await eventually(waiting, timeout=60)
    await asyncio.sleep(3)  # a few admission passes of the new leader
    assert await reason() == "project_quota"

    await ada.ok("instances", "stop", holder["instanceID"])

    async def succeeded() -> bool:
        job = (await ada.ok("-o", "json", "jobs", "get", "waits-1")).json()
        return bool(job["state"] == "succeeded")

    await eventually(succeeded, timeout=60)
