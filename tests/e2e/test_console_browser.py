"""The web console in a real browser (headless Chromium from Debian's package, driven by
Playwright) against the real stack: a tenant signs in, starts an instance and sees it
run, uploads a file and sees it listed, sees usage charts with data; another tenant sees
none of it; the operator quarantines and releases a node.

Screenshots of each page go to a temporary directory, or to GPUCLOUD_CONSOLE_SCREENSHOTS
(`make screenshots` writes docs/console/).
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s
from playwright.async_api import (
    Browser,
    Dialog,
    Page,
    ViewportSize,
    expect,
)

from gpucloud_libs.naming import tenant_namespace

from .cli_support import kubectl
from .clusters_support import HOME, SECOND, kubeconfig_of
from .platform import H100, Platform, TenantAccount, bearer
from .support import eventually, sign_in_with_key, unique

PASSWORD = "console pass phrase"
LAPTOP: ViewportSize = {"width": 1366, "height": 900}
PHONE: ViewportSize = {"width": 390, "height": 844}
#: How long a page may take to show what the platform did (an instance running, a
#: storage ready, a health change after the next refresh).
SLOW_MS = 60_000
expect.set_options(timeout=SLOW_MS)


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    wanted = os.environ.get("GPUCLOUD_CONSOLE_SCREENSHOTS")
    directory = Path(wanted) if wanted else tmp_path
    directory.mkdir(parents=True, exist_ok=True)
    return directory


async def _page(
    chromium: Browser,
    platform: Platform,
    viewport: ViewportSize = LAPTOP,
    *,
    answer: Callable[[Dialog], Awaitable[None]] | None = None,
    asked: list[str] | None = None,
) -> Page:
    """A signed-out page. Stop, delete, revoke and quarantine ask first: these journeys
    say yes (each question kept in `asked`), unless `answer` says otherwise."""
    context = await chromium.new_context(
        base_url=str(platform.http.base_url), viewport=viewport, accept_downloads=True
    )
    page = await context.new_page()
    page.set_default_timeout(SLOW_MS)

    async def accept(dialog: Dialog) -> None:
        if asked is not None:
            asked.append(dialog.message)
        await dialog.accept()

    reply = answer or accept
    page.on("dialog", lambda dialog: asyncio.ensure_future(reply(dialog)))
    return page


async def _sign_in_with_password(page: Page, email: str, role: str = "tenant-admin") -> None:
    """By keyboard alone: the form's fields are labelled and Enter submits."""
    await page.goto("/")
    await page.get_by_role("textbox", name="Email").focus()
    await page.keyboard.type(email)
    await page.keyboard.press("Tab")
    await page.keyboard.type(PASSWORD)
    await page.keyboard.press("Enter")
    await expect(page.get_by_test_id("who")).to_contain_text(role)


async def _priced_spec(platform: Platform) -> str:
    spec = await platform.spec()
    price = {"meter": "gpu_hour", "specName": spec, "amount": "3.60"}
    priced = await platform.http.post("/v1/prices", json=price, headers=platform.admin)
    assert priced.status_code == 201, priced.text
    return spec


async def test_a_tenant_starts_uploads_and_sees_usage_in_the_console(
    chromium: Browser, platform: Platform, shots: Path, tmp_path: Path
) -> None:
    """The journey of a tenant user (not their admin, who checks the spend at the end)."""
    account = await platform.tenant(password=PASSWORD)
    spec = await _priced_spec(platform)
    email = f"ada@{account.tenant_id}.test"
    user = {"email": email, "name": "Ada User", "role": "tenant-user", "password": PASSWORD}
    added = await platform.http.post("/v1/users", json=user, headers=bearer(account.admin_key))
    assert added.status_code == 201, added.text
    asked: list[str] = []
    page = await _page(chromium, platform, asked=asked)
    await page.goto("/")
    await page.screenshot(path=shots / "sign-in.png")
    # A wrong password is said in words, on the form.
    await page.get_by_role("textbox", name="Email").fill(email)
    await page.get_by_label("Password", exact=True).fill("wrong")
    await page.get_by_role("button", name="Sign in").click()
    await expect(page.get_by_role("alert")).to_contain_text("the email or password is wrong")
    await _sign_in_with_password(page, email, role="tenant-user")

    # Start an instance from the catalog and watch it run.
    await expect(page).to_have_url(re.compile("/instances$"))
    await page.get_by_label("Template").select_option("jupyter")
    await page.get_by_label("Spec").select_option(spec)
    # Beside the spec, how many would start now, by zone, as `gpucloud offer` says.
    await expect(page.get_by_test_id("free-now")).to_contain_text(
        re.compile(rf"^[1-9][0-9]* of {spec} would start now \(")
    )
    await page.get_by_role("button", name="Start", exact=True).click()
    row = page.get_by_role("row").filter(has_text=spec)
    await expect(row.get_by_text("running", exact=True)).to_be_visible()
    # "Open" lands on the notebook through the gateway, in a new tab (on the local
    # stack, the simulated node's stand-in for the container).
    async with page.context.expect_page() as opening:
        await row.get_by_role("button", name="Open :8888").click()
    opened = await opening.value

    async def landed() -> bool:
        if "Simulated workload" in await opened.inner_text("body"):
            return True
        await opened.reload()  # the stand-in is up moments after the pod runs
        return False

    await eventually(landed, timeout=30, interval=1)
    assert ".instances.localhost:" in opened.url, opened.url
    await opened.close()
    # Above the start form: what the tenant holds of its quota, the new GPU included.
    await expect(page.get_by_test_id("quota")).to_contain_text("holds 1 of")
    await page.screenshot(path=shots / "instances.png", full_page=True)
    # Its own page: where it runs, its history, its log (the simulated workload's),
    # read and then followed as it grows.
    await row.get_by_role("link").first.click()
    await expect(page).to_have_url(re.compile(r"/instances/i-[0-9a-f]+$"))
    instance_id = page.url.rsplit("/", 1)[1]
    facts = page.get_by_role("region", name="Instance", exact=True)
    await expect(facts).to_contain_text(spec)
    await expect(facts.get_by_role("button", name="Open :8888")).to_be_visible()
    await expect(page.get_by_role("region", name=re.compile("^History of"))).to_contain_text(
        "running"
    )
    log = page.get_by_role("region", name="Log", exact=True)
    await expect(log).to_contain_text("epoch")
    await log.get_by_label("Follow").check()
    await expect(log.get_by_test_id("log")).to_contain_text("epoch")
    await page.screenshot(path=shots / "instance.png", full_page=True)
    await page.get_by_role("link", name="← All instances").click()

    # A job submitted from the form that fails says why, and its log is a click away.
    await page.get_by_role("tab", name="Jobs").click()
    form = page.get_by_role("form", name="Submit a job")
    await form.get_by_label("Spec").select_option(spec)
    await form.get_by_label("Image").fill("busybox")
    await form.get_by_label("Job id (optional)").fill("broken")
    environment = form.get_by_label("Environment (optional)")
    await environment.fill("GPUCLOUD_SIM_RUN_FOR=1s 3=GPUCLOUD_SIM_EXIT_CODE")
    await form.get_by_role("button", name="Submit").click()
    # The API refuses the variable named "3", beside the field; the form keeps it all.
    await expect(environment).to_have_attribute("aria-invalid", "true")
    await expect(form.locator("#field-job-env-error")).to_contain_text("pattern")
    await expect(form.get_by_label("Job id (optional)")).to_have_value("broken")
    await environment.fill("GPUCLOUD_SIM_RUN_FOR=1s GPUCLOUD_SIM_EXIT_CODE=3")
    await form.get_by_role("button", name="Submit").click()
    job = page.get_by_role("row").filter(has_text="broken")
    await expect(job.get_by_text("failed", exact=True)).to_be_visible(timeout=30_000)
    await expect(job).to_contain_text("exit code 3")
    # Its page: why it failed, its run, its command and its log.
    await job.get_by_role("link", name="broken").click()
    await expect(page).to_have_url(re.compile("/jobs/broken$"))
    facts = page.get_by_role("region", name="Job", exact=True)
    await expect(facts).to_contain_text("exit code 3")
    await expect(page.get_by_role("table", name="Runs")).to_contain_text("failed")
    await expect(page.get_by_role("region", name="Log of the latest run")).to_contain_text("epoch")
    await page.screenshot(path=shots / "job.png", full_page=True)
    await page.go_back()
    await page.get_by_role("tab", name="Jobs").click()
    # A job's GPUs are all it holds: four nodes of a one-GPU spec are four GPUs.
    wide = {"jobID": "wide", "image": "busybox", "specName": spec, "nodes": 4,
            "env": [{"name": "GPUCLOUD_SIM_RUN_FOR", "value": "1s"}]}  # fmt: skip
    submitted = await platform.post_as_tenant(account, "/v1/jobs", wide)
    assert submitted.status_code == 202, submitted.text
    await expect(page.get_by_role("row").filter(has_text="wide")).to_contain_text(
        re.compile(r"4 x \S+ \(4 nodes\)"), timeout=10_000
    )
    await page.get_by_role("tab", name="Instances").click()

    # An inference service from the catalog: listed with its one URL.
    await page.get_by_role("tab", name="Inference services").click()
    await page.get_by_label("Template").select_option("vllm-openai")
    await page.get_by_label("Service name (id)").fill("chat")
    await page.get_by_label("Spec").select_option(spec)
    await page.get_by_role("button", name="Start service").click()
    service = page.get_by_role("row").filter(has_text="chat")
    await expect(service).to_contain_text(f"chat--{account.tenant_id}.")
    await page.screenshot(path=shots / "services.png", full_page=True)
    await service.get_by_role("button", name="Delete").click()
    await expect(service).to_have_count(0)
    await page.get_by_role("tab", name="Instances").click()

    # A storage, a file uploaded from the browser straight to the store, listed, downloaded.
    await page.get_by_role("link", name="Storages").click()
    storage_id = unique("console")
    await page.get_by_label("Name (id)").fill(storage_id)
    await page.get_by_label("Size (GiB)").fill("1")
    await page.get_by_role("button", name="Create").click()
    await expect(
        page.get_by_role("row").filter(has_text=storage_id).get_by_text("ready")
    ).to_be_visible()
    await page.get_by_role("link", name=storage_id).click()
    # One file goes up in a single presigned PUT, the other (over the 64 MiB part floor)
    # in presigned multipart parts, each answering its ETag to the browser (CORS).
    payload = os.urandom(3 * 1024 * 1024 + 17)
    upload = tmp_path / "weights.bin"
    upload.write_bytes(payload)
    large = tmp_path / "shard-0.bin"
    large.write_bytes(os.urandom(65 * 1024 * 1024))
    await page.get_by_label("Files").set_input_files([str(upload), str(large)])
    await page.get_by_role("button", name="Upload", exact=True).click()
    await expect(page.get_by_text("Uploaded 2 files")).to_be_visible()
    await expect(page.get_by_label("Upload progress")).to_have_attribute(
        "value", str(len(payload) + 65 * 1024 * 1024)
    )
    await expect(page.get_by_role("row").filter(has_text="shard-0.bin")).to_contain_text("65.0 MiB")
    listed = page.get_by_role("row").filter(has_text="weights.bin")
    await expect(listed).to_contain_text("3.0 MiB")
    async with page.expect_download() as download_info:
        await listed.get_by_role("button", name="Download weights.bin").click()
    saved = tmp_path / "downloaded.bin"
    await (await download_info.value).save_as(saved)
    assert saved.read_bytes() == payload
    # An accessor: its secret is shown once.
    await page.get_by_role("button", name="New accessor").click()
    await expect(page.get_by_test_id("secret")).to_contain_text("secret key")
    await page.screenshot(path=shots / "storage.png", full_page=True)
    credentials = page.get_by_role("row").filter(has=page.get_by_role("button", name="Revoke"))
    await expect(credentials).to_have_count(1)
    accessor_id = await credentials.locator("code").first.inner_text()
    await credentials.get_by_role("button", name="Revoke").click()
    await expect(credentials).to_have_count(0)

    # Their own usage: the running instance's GPU time, priced, as charts.
    await page.get_by_role("link", name="Usage and costs").click()
    await expect(page.get_by_role("heading", level=1)).to_have_text("Your usage and costs")

    async def spent() -> bool:
        await page.reload()
        total = page.get_by_test_id("usage-total")
        await expect(total).to_be_visible()
        return (await total.inner_text()) != "$0.00"

    await eventually(spent, timeout=90, interval=5)
    await expect(page.get_by_role("img", name="Spend by day")).to_be_visible()
    await expect(page.get_by_role("img", name="Spend by spec")).to_contain_text(spec[:21])
    await page.screenshot(path=shots / "usage.png", full_page=True)

    # Monitoring: the instance's GPU charts fill in by themselves (1-minute windows).
    await page.get_by_role("link", name="Monitoring").click()
    utilisation = page.get_by_role("img", name="Utilisation over time")
    await expect(utilisation).to_be_visible(timeout=150_000)
    assert int(await utilisation.get_attribute("data-points") or 0) >= 1
    await expect(page.get_by_text(re.compile(r"^Power \(W\), latest \d"))).to_be_visible()
    await page.screenshot(path=shots / "monitoring.png", full_page=True)

    # Admin: a key of their own, shown once.
    await page.get_by_role("link", name="Admin").click()
    await page.get_by_label("Key name").fill("laptop")
    await page.get_by_role("button", name="New API key").click()
    await expect(page.get_by_test_id("secret")).to_contain_text("gpc_")
    await page.screenshot(path=shots / "admin.png", full_page=True)
    laptop = page.get_by_role("row").filter(has_text="laptop")
    await laptop.get_by_role("button", name="Revoke").click()
    await expect(laptop).to_contain_text("revoked")

    # Their admin sees who spent it and who made the key: by name, not by id.
    admin = await _page(chromium, platform)
    await sign_in_with_key(admin, account.admin_key)
    await admin.get_by_role("link", name="Usage and costs").click()
    by_user = admin.get_by_role("img", name="Spend by user")
    await expect(by_user).to_contain_text("Ada User")
    await expect(by_user).not_to_contain_text(added.json()["userID"])
    await admin.get_by_role("link", name="Admin").click()
    made = (
        admin.get_by_role("table", name="Audit log")
        .get_by_role("row")
        .filter(has_text="POST /v1/api-keys")
    )
    await expect(made.first).to_contain_text("Ada User")
    await expect(made.first).not_to_contain_text(added.json()["userID"])
    # The admin mints a key for Ada, who need not sign in for one: shown once, to hand over.
    await admin.get_by_label("Key name").fill("ada-laptop")
    await admin.get_by_role("combobox", name=re.compile("^For")).select_option(
        label=added.json()["email"]
    )
    await admin.get_by_role("button", name="New API key").click()
    handed = await admin.get_by_test_id("secret").inner_text()
    minted = admin.get_by_role("row").filter(has_text="ada-laptop")
    await expect(minted).to_contain_text(added.json()["email"])
    who = await platform.http.get("/v1/whoami", headers=bearer(handed.strip()))
    assert (who.json()["userID"], who.json()["role"]) == (added.json()["userID"], "tenant-user")
    # And holds Ada to one GPU at once, inside the tenant's quota.
    limits = admin.get_by_role("region", name="User limits")
    await limits.get_by_role("combobox", name=re.compile("^User")).select_option(
        label=added.json()["email"]
    )
    await limits.get_by_label("Max GPUs at once").fill("1")
    await limits.get_by_role("button", name="Set limits").click()
    limited = limits.get_by_role("row").filter(has_text=added.json()["email"])
    await expect(limited).to_contain_text("1")

    async def held_to_one() -> bool:
        quota = await platform.http.get("/v1/quota", headers=bearer(handed.strip()))
        return bool(quota.json().get("yourMaxGpus") == 1)

    await eventually(held_to_one, timeout=30)
    await admin.context.close()

    # Stop the instance, then sign out: the session is gone on reload.
    await page.get_by_role("link", name="Instances").click()
    await row.get_by_role("button", name=re.compile("^Stop ")).click()
    await expect(row.get_by_text("stopped", exact=True)).to_be_visible()
    # A stopped instance starts again: the same one, on a node chosen anew.
    await row.get_by_role("button", name=re.compile("^Start .* again$")).click()
    await expect(row.get_by_text("running", exact=True)).to_be_visible(timeout=30_000)
    await row.get_by_role("button", name=re.compile("^Stop ")).click()
    await expect(row.get_by_role("button", name=re.compile("^Stop "))).to_have_count(0)
    # The storage goes with its files, once asked.
    await page.get_by_role("link", name="Storages").click()
    stored = page.get_by_role("row").filter(has_text=storage_id)
    await stored.get_by_role("button", name="Delete").click()
    await expect(stored).to_have_count(0, timeout=30_000)
    # Each of these asked first, in the user's words, and nothing else did.
    assert [question.split("?")[0] for question in asked] == [
        "Delete service chat",
        f"Revoke credentials {accessor_id}",
        "Revoke key laptop",
        f"Stop {instance_id}",
        f"Stop {instance_id}",
        f"Delete storage {storage_id} and everything in it",
    ]
    await page.get_by_role("button", name="Sign out").click()
    await expect(page.get_by_role("heading", name="Sign in to gpucloud")).to_be_visible()
    await page.reload()
    await expect(page.get_by_role("heading", name="Sign in to gpucloud")).to_be_visible()


async def _a_tenant_with_things(platform: Platform) -> tuple[TenantAccount, str, str]:
    account = await platform.tenant()
    spec = await platform.spec()
    created = await platform.start_instance(account, {"image": "trainer", "specName": spec})
    assert created.status_code == 202, created.text
    storage = await platform.storage(account, kind="object", size_bytes=2**30)
    return account, created.json()["instanceID"], storage["storageID"]


async def test_another_tenants_resources_are_nowhere_in_the_console(
    chromium: Browser, platform: Platform, shots: Path
) -> None:
    _, instance_id, storage_id = await _a_tenant_with_things(platform)
    other = await platform.tenant()
    page = await _page(chromium, platform)
    await sign_in_with_key(page, other.admin_key)
    await expect(page.get_by_text("No instances yet")).to_be_visible()
    await expect(page.get_by_text(instance_id)).to_have_count(0)
    await page.get_by_role("link", name="Storages").click()
    await expect(page.get_by_text("No storages yet.")).to_be_visible()
    # Straight to the other tenant's storage: refused, in words, never a blank page.
    await page.goto(f"/storages/{storage_id}")
    await expect(page.get_by_role("alert").first).to_contain_text("does not exist")
    await page.get_by_role("link", name="Usage and costs").click()
    await expect(page.get_by_test_id("usage-total")).to_have_text("$0.00")
    await page.get_by_role("link", name="Monitoring").click()
    await expect(page.get_by_text("Nothing running")).to_be_visible()
    # At phone width every page fits the screen.
    phone = await _page(chromium, platform, PHONE)
    await sign_in_with_key(phone, other.admin_key)
    for path in ("/instances", "/storages", "/usage", "/monitoring", "/admin"):
        await phone.goto(path)
        await expect(phone.get_by_role("heading", level=1)).to_be_visible()
        overflow = await phone.evaluate("document.documentElement.scrollWidth - innerWidth")
        assert overflow <= 0, (path, overflow)
    await phone.goto("/instances")
    await expect(phone.get_by_text("No instances yet")).to_be_visible()
    await expect(phone.get_by_label("Spec").locator("option")).not_to_have_count(0)
    await phone.screenshot(path=shots / "phone-instances.png", full_page=True)


async def test_the_operator_quarantines_and_releases_a_node_in_the_console(
    chromium: Browser, platform: Platform, shots: Path
) -> None:
    nodes: list[dict[str, Any]] = (
        await platform.http.get("/v1/nodes", headers=platform.admin)
    ).json()
    chosen = next(n for n in nodes if n["health"] == "healthy" and n["gpusInUse"] == 0)
    idle = chosen["node"]
    asked: list[str] = []
    page = await _page(chromium, platform, asked=asked)
    await sign_in_with_key(page, platform.admin_key)
    await expect(page).to_have_url(re.compile("/fleet$"))
    await expect(page.get_by_role("table", name="Fleet by zone and GPU type")).to_be_visible()
    try:
        await page.get_by_label("Quarantine reason").fill("fan replacement")
        await page.get_by_role("button", name=f"Quarantine {idle}").click()
        row = page.get_by_role("row").filter(has=page.get_by_role("cell", name=idle, exact=True))
        # The console reads the node until the request is applied (a few seconds, through
        # the telemetry consumer), then the summary with it: the two tables agree.
        await expect(row.get_by_text("quarantined", exact=True)).to_be_visible()
        summary = page.get_by_role("table", name="Fleet by zone and GPU type")
        headers = await summary.get_by_role("columnheader").all_inner_texts()
        group = (
            summary.get_by_role("row")
            .filter(has_text=chosen["gpuType"])
            .filter(has_text=chosen["zone"])
        )
        fleet = (await platform.http.get("/v1/fleet", headers=platform.admin)).json()
        [counted] = [
            g["quarantinedNodes"] for g in fleet["groups"]
            if (g["zone"], g["gpuType"]) == (chosen["zone"], chosen["gpuType"])
        ]  # fmt: skip
        assert counted >= 1
        await expect(group.get_by_role("cell").nth(headers.index("Quarantined"))).to_have_text(
            str(counted), timeout=1_000
        )
        await expect(row).to_contain_text("quarantined by an operator: fan replacement")
        await row.scroll_into_view_if_needed()
        await page.screenshot(path=shots / "fleet.png")

        async def cordoned() -> bool:
            found = await platform.http.get("/v1/nodes", headers=platform.admin)
            return any(n["node"] == idle and n["health"] == "quarantined" for n in found.json())

        await eventually(cordoned, timeout=30)
        await row.get_by_role("button", name=f"Release {idle}").click()
        await expect(row.get_by_text("healthy", exact=True)).to_be_visible()
        assert asked == [f"Quarantine {idle}? Nothing new is placed on it."]
    finally:  # a failed run must not leave a fleet node out of service for the next tests
        await platform.http.post(f"/v1/nodes/{idle}/release", headers=platform.admin)
    for path, name in (
        ("/tenants", "tenants"),
        ("/prices", "prices"),
        ("/revenue", "revenue"),
        ("/stocks", "stocks"),
    ):
        await page.goto(path)
        await expect(page.get_by_role("heading", level=1)).to_be_visible()
        await expect(page.get_by_text("Loading…")).to_have_count(0)
        await expect(page.get_by_role("alert")).to_have_count(0)
        await page.screenshot(path=shots / f"operator-{name}.png")
    # A tenant's key never sees the operator's pages' data.
    account = await platform.tenant()
    tenant_page = await _page(chromium, platform)
    await sign_in_with_key(tenant_page, account.admin_key)
    await tenant_page.goto("/fleet")
    await expect(tenant_page.get_by_role("heading", level=1)).to_have_text(
        "Not a page for your role"
    )
    await expect(tenant_page.get_by_label("Quarantine reason")).to_have_count(0)
    assert (
        await platform.http.get("/v1/fleet", headers=bearer(account.admin_key))
    ).status_code == 403


async def test_each_catalog_template_starts_as_its_template_from_the_console(
    chromium: Browser, platform: Platform, kube: k8s.ApiClient
) -> None:
    """Picked in the console by a tenant user, a template's command, arguments,
    environment and ports reach the pod as the catalog gives them; the SSH box takes
    the user's public key."""
    account = await platform.tenant(max_gpus=16, max_instances=8)
    spec = await platform.spec()
    _, _, user_key = await platform.member(account)  # a tenant user, not its admin
    owner = bearer(user_key)
    catalog = (await platform.http.get("/v1/templates", headers=owner)).json()
    page = await _page(chromium, platform)
    await sign_in_with_key(page, user_key)
    core = k8s.CoreV1Api(kube)
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGJvb3RzdHJhcHBlZGtleWZvcnRoZXRlc3Q dev@laptop"
    for template in [t for t in catalog if "instance" in t["kinds"]]:
        instance_id = await _start_from_console(page, platform, owner, template, spec, key)
        pod = await _pod_of(core, account, instance_id)
        [container] = pod.spec.containers
        name = template["templateID"]
        assert container.image == template["image"], name
        assert container.image_pull_policy == "Always", name  # a cached image is no key
        assert container.command == template["command"], name
        assert container.args == template["args"], name
        assert pod.spec.security_context.run_as_user == template["runAsUser"], name
        assert sorted(p.container_port for p in container.ports) == sorted(
            p["port"] for p in template["ports"]
        ), name
        env = {e.name: e.value for e in container.env or []}
        for wanted in template["env"]:
            expected = key if wanted["name"] == "PUBLIC_KEY" else wanted["value"]
            assert env.get(wanted["name"]) == expected, (name, wanted["name"])
        if template["servingPort"] and template["readinessPath"]:
            probe = container.readiness_probe
            assert probe.http_get.path == template["readinessPath"], name
            assert probe.http_get.port == template["servingPort"], name

    # A serving template started as a service brings its command, arguments and user too.
    await page.get_by_role("tab", name="Inference services").click()
    form = page.locator("form", has=page.get_by_role("heading", name="Start an inference service"))
    for template in [t for t in catalog if "service" in t["kinds"]]:
        service_id = unique("tpl")
        await form.get_by_label("Template").select_option(template["templateID"])
        await form.get_by_label("Service name (id)").fill(service_id)
        await form.get_by_label("Spec").select_option(spec)
        await form.get_by_role("button", name="Start service").click()

        async def replica(service: str = service_id) -> Any:
            pods = await core.list_namespaced_pod(
                tenant_namespace(account.tenant_id),
                label_selector=f"gpucloud.io/inference-service={service}",
            )
            return pods.items[0] if pods.items else None

        pod = await eventually(replica, timeout=30)
        [container] = pod.spec.containers
        name = template["templateID"]
        assert (container.command, container.args) == (template["command"], template["args"]), name
        assert pod.spec.security_context.run_as_user == template["runAsUser"], name
        env = {e.name: e.value for e in container.env or []}
        assert all(env.get(e["name"]) == e["value"] for e in template["env"]), name


async def _start_from_console(
    page: Page,
    platform: Platform,
    owner: dict[str, str],
    template: dict[str, Any],
    spec: str,
    key: str,
) -> str:
    """Start `template` on `spec` from the console's form; the new instance's id."""
    before = set(await _instance_ids(platform, owner))
    await page.get_by_label("Template").select_option(template["templateID"])
    await page.get_by_label("Spec").select_option(spec)
    if any(env["name"] == "PUBLIC_KEY" for env in template["env"]):
        await page.get_by_label("SSH public key").fill(key)
    await page.get_by_role("button", name="Start", exact=True).click()

    async def started() -> str | None:
        new = [i for i in await _instance_ids(platform, owner) if i not in before]
        return new[0] if new else None

    return await eventually(started, timeout=30)


async def _instance_ids(platform: Platform, owner: dict[str, str]) -> list[str]:
    listed = (await platform.http.get("/v1/gpu-instances", headers=owner)).json()
    items = listed["items"] if isinstance(listed, dict) else listed
    return [instance["instanceID"] for instance in items]


async def _pod_of(core: k8s.CoreV1Api, account: TenantAccount, instance_id: str) -> Any:
    async def made() -> Any:
        try:
            return await core.read_namespaced_pod(
                f"inst-{instance_id}", tenant_namespace(account.tenant_id)
            )
        except k8s.ApiException:
            return None

    return await eventually(made, timeout=30)


async def test_a_tenant_user_sees_their_own_spend_and_no_forms_they_may_not_use(
    chromium: Browser, platform: Platform
) -> None:
    account = await platform.tenant()
    spec = await _priced_spec(platform)
    _, _, user_key = await platform.member(account)  # a tenant user
    started = await platform.start_instance(account, {"image": "trainer", "specName": spec})
    assert started.status_code == 202, started.text
    mine = await platform.http.post(
        "/v1/gpu-instances", json={"image": "trainer", "specName": spec}, headers=bearer(user_key)
    )
    assert mine.status_code == 202, mine.text
    page = await _page(chromium, platform)
    await sign_in_with_key(page, user_key)

    # Their own spend: the report counts what they started, not the admin's instance.
    async def own_rows() -> list[str] | None:
        report = await platform.http.get("/v1/usage/mine", headers=bearer(user_key))
        assert report.status_code == 200, report.text
        keys = [row["key"] for row in report.json()["rows"]]
        return keys or None

    assert await eventually(own_rows, timeout=30) == [mine.json()["instanceID"]]
    await page.goto("/usage")
    await expect(page.get_by_role("heading", level=1)).to_have_text("Your usage and costs")
    await expect(page.get_by_test_id("usage-total")).to_contain_text("$")
    await expect(page.get_by_role("alert")).to_have_count(0)
    await expect(page.get_by_label("Monthly budget (USD)")).to_have_count(0)
    await page.goto("/monitoring")
    await expect(page.get_by_text("Alert rules are your tenant admins' to set.")).to_be_visible()
    await expect(page.get_by_role("alert")).to_have_count(0)
    await page.goto("/fleet")
    await expect(page.get_by_role("heading", level=1)).to_have_text("Not a page for your role")

    # Stop asks first; saying no leaves the instance as it was.
    asked: list[str] = []

    async def decline(dialog: Dialog) -> None:
        asked.append(dialog.message)
        await dialog.dismiss()

    careful = await _page(chromium, platform, answer=decline)
    await sign_in_with_key(careful, user_key)
    instance_id = mine.json()["instanceID"]
    await careful.get_by_role("button", name=f"Stop {instance_id}").click()

    async def was_asked() -> bool:
        return bool(asked)

    await eventually(was_asked, timeout=10, interval=0.2)
    assert asked[0].startswith(f"Stop {instance_id}?")
    got = await platform.http.get(f"/v1/gpu-instances/{instance_id}", headers=bearer(user_key))
    assert got.json()["stopRequested"] is False


async def test_a_tenant_admin_adds_a_user_a_budget_and_an_idle_stop_rule_in_the_console(
    chromium: Browser, platform: Platform, shots: Path
) -> None:
    account = await platform.tenant()
    page = await _page(chromium, platform)
    await sign_in_with_key(page, account.admin_key)
    headers = bearer(account.admin_key)

    await page.get_by_role("link", name="Admin").click()
    email = f"{unique('member')}@{account.tenant_id}.test"
    members = page.get_by_role("region", name="Users", exact=True)
    await members.get_by_label("Email").fill(email)
    await members.get_by_label("Name", exact=True).fill("Ada Member")
    await members.get_by_label("Role").select_option("tenant-user")
    await members.get_by_role("button", name="Add user").click()
    await expect(page.get_by_role("row").filter(has_text=email)).to_contain_text("tenant-user")
    users = (await platform.http.get("/v1/users", headers=headers)).json()
    assert [u["role"] for u in users if u["email"] == email] == ["tenant-user"]

    await page.get_by_role("link", name="Usage and costs").click()
    budget_field = page.get_by_label("Monthly budget (USD)")
    await budget_field.fill("0")  # refused by the API, beside the field
    await page.get_by_role("button", name="Save budget").click()
    await expect(budget_field).to_have_attribute("aria-invalid", "true")
    await expect(page.locator("#field-budget-error")).to_contain_text("greater than or equal to 1")
    await budget_field.fill("120")
    await page.get_by_role("button", name="Save budget").click()
    await expect(page.get_by_text(re.compile(r"spent of \$120\.00"))).to_be_visible()
    await expect(budget_field).not_to_have_attribute("aria-invalid", "true")
    budget = (await platform.http.get("/v1/budget", headers=headers)).json()
    assert budget["monthlyBudgetCents"] == 12_000, budget

    await page.get_by_role("link", name="Monitoring").click()
    rules_card = page.get_by_role("region", name="Alert rules on your instances")
    await rules_card.get_by_label("Name", exact=True).fill("idle for ten minutes")
    await rules_card.get_by_label("Metric").select_option("utilization_gpu_pct")
    await rules_card.get_by_label("Comparison").select_option("<")
    await rules_card.get_by_label("Threshold").fill("5")
    await rules_card.get_by_label("For (s)").fill("600")
    await rules_card.get_by_label("Then").select_option("stop_instance")
    await rules_card.get_by_role("button", name="Add rule").click()
    rule = rules_card.get_by_role("row").filter(has_text="idle for ten minutes")
    await expect(rule).to_contain_text("utilization_gpu_pct < 5 for 600 s")
    await expect(rule).to_contain_text("stop the instance")
    await page.screenshot(path=shots / "tenant-admin-rules.png")
    rules = (await platform.http.get("/v1/alert-rules", headers=headers)).json()
    assert [(r["action"], r["durationS"]) for r in rules] == [("stop_instance", 600)]


async def test_the_operator_onboards_a_customer_from_the_console(
    chromium: Browser, platform: Platform
) -> None:
    """A spec, its price in cents, a tenant with its first admin (whose key is shown
    once), and that admin starting on the new spec; then the spec goes."""
    asked: list[str] = []
    page = await _page(chromium, platform, asked=asked)
    await sign_in_with_key(page, platform.admin_key)
    spec, tenant_id = unique("onboard"), unique("t-onboard")

    await page.get_by_role("link", name="Specs").click()
    await page.get_by_label("Spec name").fill(spec)
    await page.get_by_label("GPU type").select_option(H100)  # the fleet's types
    await page.get_by_label("GPUs", exact=True).fill("1")
    await page.get_by_role("button", name="Create spec").click()
    row = page.get_by_role("row").filter(has_text=spec)
    await expect(row).to_contain_text(f"1 x {H100}")

    await page.get_by_role("link", name="Prices").click()
    await page.get_by_label("Spec").select_option(spec)  # only specs that exist
    await page.get_by_label("Amount (USD)").fill("2.50")
    await page.get_by_role("button", name="Set price").click()
    await expect(page.get_by_role("row").filter(has_text=spec)).to_contain_text("2.50")
    # A price set to come next year may be withdrawn; the one in effect may not.
    await page.get_by_label("Spec").select_option(spec)
    await page.get_by_label("Amount (USD)").fill("3.75")
    next_year = datetime.now().year + 1
    await page.get_by_label("From (your time; empty: now)").fill(f"{next_year}-01-01T00:00")
    await page.get_by_role("button", name="Set price").click()
    scheduled = page.get_by_role("row").filter(has_text=spec).filter(has_text="3.75")
    await expect(scheduled).to_contain_text(str(next_year))
    await expect(scheduled).to_contain_text("UTC")  # every moment says its zone
    await expect(
        page.get_by_role("row").filter(has_text=spec).filter(has_text="2.50")
    ).to_contain_text("in effect")
    await scheduled.get_by_role("button", name=re.compile("^Withdraw")).click()  # confirmed
    await expect(scheduled).to_have_count(0)
    await expect(page.get_by_role("row").filter(has_text=spec)).to_have_count(1)

    # A warm unit of the new spec, then none: the stock's row follows both.
    await page.get_by_role("link", name="Stocks").click()
    await page.get_by_label("Spec").select_option(spec)  # only specs that exist
    await page.get_by_label("Units").fill("1")
    await page.get_by_role("button", name="Add units").click()
    stocks = page.get_by_role("row").filter(has=page.get_by_role("cell", name=spec, exact=True))
    home = stocks.filter(has=page.get_by_role("cell", name="local-1", exact=True))
    target = home.get_by_role("cell").nth(2)  # cluster, spec, target
    await expect(target).to_have_text("1")
    await page.get_by_role("button", name="Remove units").click()
    await expect(target).to_have_text("0")
    # A stock of its own in the second cluster, picked by name.
    await page.get_by_label("Cluster").select_option("local-2")
    await page.get_by_role("button", name="Add units").click()
    second = stocks.filter(has=page.get_by_role("cell", name="local-2", exact=True))
    await expect(second.get_by_role("cell").nth(2)).to_have_text("1")
    await expect(target).to_have_text("0")
    await page.get_by_role("button", name="Remove units").click()
    await expect(second.get_by_role("cell").nth(2)).to_have_text("0")

    await page.get_by_role("link", name="Tenants").click()
    form = page.get_by_role("form", name="New tenant")
    # The API's refusal shows beside the field it names, and nothing typed is lost.
    await form.get_by_label("Tenant id").fill("Not An Id!")
    await form.get_by_label("Name", exact=True).fill("Onboarded Ltd")
    await form.get_by_label("Admin's email").fill(f"admin@{tenant_id}.test")
    await form.get_by_label("Admin's name").fill("First Admin")
    await form.get_by_role("button", name="Create tenant").click()
    tenant_field = form.get_by_label("Tenant id")
    await expect(tenant_field).to_have_attribute("aria-invalid", "true")
    await expect(form.locator("#field-tenantID-error")).to_contain_text("pattern")
    await expect(form.get_by_label("Admin's name")).not_to_have_attribute("aria-invalid", "true")
    await expect(form.get_by_label("Name", exact=True)).to_have_value("Onboarded Ltd")
    await tenant_field.fill(tenant_id)
    await form.get_by_role("button", name="Create tenant").click()
    platform.tenants.append(tenant_id)  # removed at the end, as the fixture's own
    key = await form.get_by_test_id("secret").inner_text()
    assert key.startswith("gpc_"), key
    await expect(page.get_by_role("row").filter(has_text=tenant_id)).to_be_visible()
    # A second admin for the customer, added by the operator.
    await page.get_by_role("button", name=f"Users of {tenant_id}").click()
    members = page.get_by_role("region", name=f"Users of {tenant_id}")
    await members.get_by_label("Email").fill(f"second@{tenant_id}.test")
    await members.get_by_label("Name", exact=True).fill("Second Admin")
    await members.get_by_label("Role").select_option("tenant-admin")
    await members.get_by_role("button", name="Add user").click()
    table = members.get_by_role("table", name=f"Users of {tenant_id}")
    await expect(table.get_by_role("row").filter(has_text="Second Admin")).to_contain_text(
        "tenant-admin"
    )
    await expect(table.get_by_role("row").filter(has_text="First Admin")).to_be_visible()

    # The new admin signs in with the key handed over and finds the new spec.
    admin = await _page(chromium, platform)
    await sign_in_with_key(admin, key)
    await expect(admin.get_by_test_id("who")).to_contain_text(tenant_id)
    await expect(admin.get_by_label("Spec").first.locator(f"option[value='{spec}']")).to_have_count(
        1
    )

    await page.get_by_role("link", name="Specs").click()
    await page.get_by_role("row").filter(has_text=spec).get_by_role("button", name="Delete").click()
    await expect(page.get_by_role("row").filter(has_text=spec)).to_have_count(0)
    # The withdrawal and the deletion each asked first; adding and removing units did not.
    assert [question.split("?")[0].split(" ")[0] for question in asked] == ["Withdraw", "Delete"]
    assert asked[-1].startswith(f"Delete spec {spec}?")


async def test_the_operator_cordons_a_cluster_and_is_told_why_a_registration_fails_in_the_console(
    chromium: Browser, platform: Platform, shots: Path, tmp_path: Path
) -> None:
    asked: list[str] = []
    page = await _page(chromium, platform, asked=asked)
    await sign_in_with_key(page, platform.admin_key)
    await page.get_by_role("link", name="Clusters").click()
    row = page.get_by_role("row").filter(has_text=f"{HOME} (home)")
    await expect(row).to_contain_text("active")
    await expect(row).to_contain_text("nodes ready", timeout=40_000)  # the first look
    await expect(row).to_contain_text("x NVIDIA-H100-80GB-HBM3")
    # The home cluster is the service's own: it has no Remove.
    await expect(row.get_by_role("button", name="Remove")).to_have_count(0)
    try:
        await row.get_by_role("button", name="Cordon").click()
        await expect(row).to_contain_text("cordoned")
        await page.screenshot(path=shots / "operator-clusters.png")
        await row.get_by_role("button", name="Uncordon").click()
        await expect(row).to_contain_text("active")
    finally:
        await platform.http.post(f"/v1/clusters/{HOME}/uncordon", headers=platform.admin)
    assert asked == [
        f"Cordon {HOME}? No new workload is placed in it; those in it go on.",
        f"Place new workloads in {HOME} again?",
    ]

    unreachable = tmp_path / "unreachable.yaml"
    unreachable.write_text(kubeconfig_of("instances", server="https://127.0.0.1:1"))
    form = page.get_by_role("form", name="Register a cluster")
    await form.get_by_label("Cluster name").fill("east-1")
    await form.get_by_label("Region").fill("us-east")
    await form.get_by_label("Zones (comma-separated)").fill("us-east-1a, us-east-1b")
    await form.get_by_label("Kubeconfig (sealed, never shown again)").set_input_files(unreachable)
    await form.get_by_role("button", name="Register cluster").click()
    await expect(form.get_by_role("alert")).to_contain_text("cannot be reached")
    await expect(form.get_by_label("Cluster name")).to_have_value("east-1")  # nothing lost
    await expect(page.get_by_role("row").filter(has_text="east-1")).to_have_count(0)


async def test_a_tenant_picks_the_region_an_instance_runs_in_from_the_console(
    chromium: Browser, platform: Platform
) -> None:
    """The region picker offers the regions whose clusters have the spec's GPUs; the
    instance runs in the one picked, and its row says which cluster."""
    account = await platform.tenant()
    h100 = await platform.spec()
    a100 = await platform.spec(gpu_type="NVIDIA-A100-SXM4-40GB")  # the home cluster's alone
    page = await _page(chromium, platform)
    await sign_in_with_key(page, account.admin_key)
    await page.get_by_label("Spec").select_option(a100)
    region = page.get_by_label("Region")
    await expect(region.locator("option")).to_have_text(["any region with these GPUs", HOME])
    await page.get_by_label("Spec").select_option(h100)
    await expect(region.locator("option")).to_have_text(
        ["any region with these GPUs", HOME, SECOND]
    )
    await region.select_option(SECOND)
    await page.get_by_label("Image", exact=True).fill("busybox")
    await page.get_by_role("button", name="Start", exact=True).click()
    row = page.get_by_role("row").filter(has_text=h100)
    await expect(row.get_by_text("running", exact=True)).to_be_visible()
    await expect(row.get_by_role("cell", name=SECOND, exact=True)).to_be_visible()
    listed = await platform.http.get("/v1/gpu-instances", headers=bearer(account.admin_key))
    [instance] = listed.json()["items"]
    assert (instance["cluster"], instance["zone"]) == (SECOND, "zone-c")
    await platform.http.post(
        f"/v1/gpu-instances/{instance['instanceID']}/stop", headers=bearer(account.admin_key)
    )


async def test_an_invited_person_joins_from_the_link_and_starts_an_instance(
    chromium: Browser, platform: Platform, tmp_path: Path
) -> None:
    """Invite, accept, start in a project (issue "Tenant self-service"): the admin
    invites from the Admin page into the project `vision` and sends the link; the person
    opens it, sets a name and a password, is signed in, a member of vision, and starts
    an instance there."""
    account = await platform.tenant()
    spec = await _priced_spec(platform)
    made = await platform.http.post(
        "/v1/projects", json={"projectID": "vision", "name": "Vision", "maxGpus": 4},
        headers=bearer(account.admin_key),
    )  # fmt: skip
    assert made.status_code == 201, made.text
    admin = await _page(chromium, platform)
    await sign_in_with_key(admin, account.admin_key)
    await admin.get_by_role("link", name="Admin").click()
    invitations = admin.get_by_role("region", name="Invitations")
    email = f"{unique('grace')}@{account.tenant_id}.test"
    await invitations.get_by_label("Email to invite").fill(email)
    await invitations.get_by_role("checkbox", name="vision").check()
    await invitations.get_by_role("button", name="Invite").click()
    link = (await admin.get_by_test_id("secret").inner_text()).strip()
    assert "/join#gpi_" in link, link
    pending = invitations.get_by_role("row").filter(has_text=email)
    await expect(pending).to_contain_text("pending")
    await expect(pending).to_contain_text("vision")

    person = await _page(chromium, platform)
    await person.goto(link)
    await expect(
        person.get_by_text(f"invites {email} as tenant-user, in projects vision")
    ).to_be_visible()
    await person.get_by_label("Your name").fill("Grace")
    await person.get_by_label("New password").fill(PASSWORD)
    await person.get_by_role("button", name="Join and sign in").click()
    await expect(person).to_have_url(re.compile("/instances$"))
    assert "gpi_" not in person.url  # the secret left the address bar
    await _member_known_to_the_instances_service(platform, email, "vision")
    await person.get_by_label("Template").select_option("jupyter")
    await person.get_by_label("Spec").select_option(spec)
    await person.get_by_role("combobox", name=re.compile("^Project")).select_option("vision")
    await person.get_by_role("button", name="Start", exact=True).click()
    row = person.get_by_role("row").filter(has_text=spec)
    await expect(row.get_by_text("running", exact=True)).to_be_visible()
    await expect(row).to_contain_text("vision")
    instance_id = (await row.get_by_role("link").first.inner_text()).strip()
    # kubectl for the project's namespace, from the Admin page: it lists the
    # instance's pod there.
    await person.get_by_role("link", name="Admin").click()
    access = person.get_by_role("region", name="kubectl")
    await access.get_by_role("combobox", name=re.compile("^Project")).select_option("vision")
    await access.get_by_role("button", name="Get a kubeconfig").click()
    await expect(access.get_by_role("link", name="Download kubeconfig")).to_be_visible()
    await expect(access).to_contain_text("of project vision")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(await person.get_by_test_id("secret").inner_text())
    code, pods = await kubectl(kubeconfig, "get", "pods", "-o", "name")
    assert code == 0, pods
    assert instance_id in pods, pods

    # The admin sees it accepted; the link no longer works.
    await admin.reload()
    accepted = (
        admin.get_by_role("region", name="Invitations").get_by_role("row").filter(has_text=email)
    )
    await expect(accepted).to_contain_text("accepted")
    again = await _page(chromium, platform)
    await again.goto(link)
    await expect(again.get_by_role("alert")).to_contain_text("already used")


async def _member_known_to_the_instances_service(
    platform: Platform, email: str, project: str
) -> None:
    """Wait until the membership an acceptance gave reached the instances service with
    the tenant's event: a create naming the project and no spec is then refused for
    its spec (422), not for the project (404). Nothing is started."""
    token = await platform.http.post("/v1/tokens", json={"email": email, "password": PASSWORD})
    assert token.status_code == 201, token.text
    auth = {"Authorization": f"Bearer {token.json()['token']}"}
    probe = {"specName": "no-such-spec", "image": "busybox", "project": project}

    async def known() -> bool:
        answer = await platform.http.post("/v1/gpu-instances", json=probe, headers=auth)
        return answer.status_code == 422

    await eventually(known, timeout=30)
