"""Single sign-on through a real OpenID Connect provider (issue "Tenant self-service",
item 4): Dex, started for these tests alone on loopback, with users in groups. A
tenant admin sets it up from the CLI (an issuer that does not answer discovery is a
422); a member of a mapped group signs in to the console in headless Chromium,
through the provider's own login page, and is made a user with the group's role; a
user of no mapped group is refused without being told which part was wrong; a
sign-in's state works once, and only in the browser that began it; a user of
another tenant is not signed in by this tenant's provider; the CLI signs in with a
code entered at the provider (`gpucloud login --sso`); and an invitation is
accepted by signing in there, from the console's Join page or the CLI."""

from __future__ import annotations

import asyncio
import json
import re
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from playwright.async_api import Browser, Page, expect

from gpucloud_stack import provision

from .cli_support import cli_for
from .platform import Platform, TenantAccount, assert_problem, bearer
from .support import eventually, unique

PASSWORD = "a provider's password"
CLIENT_SECRET = "dex client secret for the tests"


@dataclass(frozen=True)
class Provider:
    issuer: str
    #: The provider's users' emails by name (unique per run: users outlive a stack's tests).
    emails: dict[str, str]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
async def dex(
    stack_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Provider]:
    """Dex on a loopback port, for this module: the gateway is its one client."""
    gateway = stack_env["GPUCLOUD_GATEWAY_URL"].rstrip("/")
    binary = provision.ensure(provision.DEX, say=False) / "dex"
    port = _free_port()
    issuer = f"http://127.0.0.1:{port}/dex"
    users = [
        ("grace", ["ml-admins"]), ("hopper", ["ml-team"]), ("mallory", ["strangers"]),
        ("linus", ["ml-team"]), ("ada", ["ml-team"]), ("joan", ["guests"]), ("kay", ["guests"]),
        ("barbara", ["ml-team", "vision-team"]),
    ]  # fmt: skip
    emails = {name: f"{unique(name)}@corp.test" for name, _ in users}
    config = {
        "issuer": issuer, "listen": f"127.0.0.1:{port}",
        "clients": [{"id": "gpucloud", "secret": CLIENT_SECRET, "name": "gpucloud",
                     # Dex's device flow asks for its callback by path alone.
                     "redirectURIs": [f"{gateway}/v1/sso/callback", "/dex/device/callback"]}],
        "users": [{"email": emails[name], "password": PASSWORD, "name": name.title(),
                   "groups": groups} for name, groups in users],
    }  # fmt: skip
    path = tmp_path_factory.mktemp("dex") / "dex.json"
    path.write_text(json.dumps(config))
    process = await asyncio.create_subprocess_exec(
        str(binary), "-config", str(path),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip

    async def answering() -> bool:
        async with httpx.AsyncClient() as http:
            try:
                found = await http.get(f"{issuer}/.well-known/openid-configuration")
            except httpx.TransportError:
                return False
        return found.status_code == 200

    try:
        await eventually(answering, timeout=30)
        yield Provider(issuer, emails)
    finally:
        process.terminate()
        await process.wait()


async def _sign_in(chromium: Browser, platform: Platform, tenant_id: str, email: str) -> Page:
    context = await chromium.new_context(base_url=str(platform.http.base_url))
    page = await context.new_page()
    await page.goto("/")
    await page.get_by_role("radio", name="Single sign-on").check()
    await page.get_by_label("Tenant").fill(tenant_id)
    await page.get_by_role("button", name="Sign in").click()
    # The provider's own login page.
    await page.get_by_label("Email Address").fill(email)
    await page.get_by_label("Password").fill(PASSWORD)
    await page.get_by_role("button", name="Login").click()
    return page


async def _set_up(platform: Platform, dex: Provider, tmp_path: Path, *flags: str) -> TenantAccount:
    """A tenant whose admin set Dex up from the CLI: ml-admins are its admins, ml-team
    its users."""
    account = await platform.tenant()
    admin = cli_for(tmp_path / "admin", platform)
    assert (await admin.login(account.admin_key)).code == 0
    await admin.ok(
        "sso", "set", "--issuer", dex.issuer, "--client-id", "gpucloud", "--client-secret-stdin",
        "--group", "ml-admins=tenant-admin", "--group", "ml-team=tenant-user", *flags,
        stdin=f"{CLIENT_SECRET}\n",
    )  # fmt: skip
    return account


async def test_a_group_member_signs_in_through_the_provider_with_the_groups_role(
    platform: Platform, dex: Provider, chromium: Browser, tmp_path: Path
) -> None:
    account = await platform.tenant()
    admin = cli_for(tmp_path / "admin", platform)
    assert (await admin.login(account.admin_key)).code == 0
    nowhere = await admin.run(
        "sso", "set", "--issuer", "http://127.0.0.1:9/nothing", "--client-id", "gpucloud",
        "--client-secret-stdin", stdin=f"{CLIENT_SECRET}\n",
    )  # fmt: skip
    assert nowhere.code == 1
    assert "did not answer OpenID Connect discovery" in nowhere.err
    configured = await admin.ok(
        "-o", "json", "sso", "set", "--issuer", dex.issuer, "--client-id", "gpucloud",
        "--client-secret-stdin", "--group", "ml-admins=tenant-admin",
        "--group", "ml-team=tenant-user", stdin=f"{CLIENT_SECRET}\n",
    )  # fmt: skip
    assert configured.json()["redirectUri"] == f"{platform.http.base_url}/v1/sso/callback"
    assert CLIENT_SECRET not in (await admin.ok("-o", "json", "sso", "show")).out

    # Grace, of ml-admins, is made a tenant admin on her first sign-in.
    page = await _sign_in(chromium, platform, account.tenant_id, dex.emails["grace"])
    await expect(page).to_have_url(re.compile("/instances$"), timeout=15_000)
    await expect(page.get_by_role("button", name="Sign out")).to_be_visible()
    who = (await (await page.request.get("/v1/console/session")).json())["principal"]
    assert (who["role"], who["tenantID"]) == ("tenant-admin", account.tenant_id)
    users = await platform.http.get("/v1/users", headers=bearer(account.admin_key))
    made = [u for u in users.json() if u["email"] == dex.emails["grace"]]
    assert [(u["role"], u["hasPassword"]) for u in made] == [("tenant-admin", False)]
    await page.context.close()

    # Hopper, of ml-team, is a tenant user.
    page = await _sign_in(chromium, platform, account.tenant_id, dex.emails["hopper"])
    await expect(page.get_by_role("button", name="Sign out")).to_be_visible(timeout=15_000)
    who = (await (await page.request.get("/v1/console/session")).json())["principal"]
    assert who["role"] == "tenant-user"
    await page.context.close()

    # Mallory's groups give no role: refused, and told nothing of which check failed.
    refused = await _sign_in(chromium, platform, account.tenant_id, dex.emails["mallory"])
    await expect(refused.locator("body")).to_contain_text("the sign-in was refused")
    await expect(refused.locator("body")).not_to_contain_text("group")
    await refused.context.close()

    # Grace again: the same user (linked by the provider's subject), who now admits
    # only users an admin adds, from the console's card, the rest kept as it was.
    page = await _sign_in(chromium, platform, account.tenant_id, dex.emails["grace"])
    await page.get_by_role("link", name="Admin").click()
    card = page.get_by_role("region", name="Single sign-on")
    await expect(card.get_by_label("Issuer")).to_have_value(dex.issuer)
    await expect(card.get_by_label("Groups (group=role, …)")).to_have_value(
        "ml-admins=tenant-admin, ml-team=tenant-user"
    )
    await card.get_by_label("Client secret").fill(CLIENT_SECRET)
    await card.get_by_label("Make a user at their first sign-in").uncheck()
    await card.get_by_role("button", name="Save single sign-on").click()
    await expect(card).to_contain_text("users an admin added only")
    await page.context.close()
    shown = (await admin.ok("-o", "json", "sso", "show")).json()
    assert (shown["createUsers"], shown["groupRoles"]["ml-team"]) == (False, "tenant-user")
    users = await platform.http.get("/v1/users", headers=bearer(account.admin_key))
    assert [u["email"] for u in users.json()].count(dex.emails["grace"]) == 1
    refused = await _sign_in(chromium, platform, account.tenant_id, dex.emails["ada"])
    await expect(refused.locator("body")).to_contain_text("the sign-in was refused")
    await refused.context.close()


async def test_a_providers_groups_give_projects_at_each_sign_in(
    platform: Platform, dex: Provider, chromium: Browser, tmp_path: Path
) -> None:
    """A group mapped to a project makes its members members of the project at each
    sign-in; a user whose groups no longer give a mapped project leaves it."""
    account = await platform.tenant()
    admin = cli_for(tmp_path / "admin", platform)
    assert (await admin.login(account.admin_key)).code == 0
    for project in ("vision", "nlp"):
        await admin.ok("projects", "create", project)
    sso = ("sso", "set", "--issuer", dex.issuer, "--client-id", "gpucloud",
           "--client-secret-stdin", "--group", "ml-team=tenant-user")  # fmt: skip
    unknown = await admin.run(*sso, "--group-project", "vision-team=speech",
                              stdin=f"{CLIENT_SECRET}\n")  # fmt: skip
    assert unknown.code == 1
    assert "project 'speech' does not exist" in unknown.err
    await admin.ok(*sso, "--group-project", "vision-team=vision", stdin=f"{CLIENT_SECRET}\n")

    async def members(project: str) -> list[str]:
        shown = (await admin.ok("-o", "json", "projects", "show", project)).json()
        return [member["email"] for member in shown["members"]]

    barbara = dex.emails["barbara"]
    page = await _sign_in(chromium, platform, account.tenant_id, barbara)
    await expect(page.get_by_role("button", name="Sign out")).to_be_visible(timeout=15_000)
    await page.context.close()
    assert (await members("vision"), await members("nlp")) == ([barbara], [])

    # Her group now gives nlp, and vision is another group's: she moves at her next
    # sign-in.
    await admin.ok(*sso, "--group-project", "vision-team=nlp",
                   "--group-project", "strangers=vision", stdin=f"{CLIENT_SECRET}\n")  # fmt: skip
    shown = (await admin.ok("-o", "json", "sso", "show")).json()
    assert shown["groupProjects"] == {"vision-team": ["nlp"], "strangers": ["vision"]}
    page = await _sign_in(chromium, platform, account.tenant_id, barbara)
    await expect(page.get_by_role("button", name="Sign out")).to_be_visible(timeout=15_000)
    await page.context.close()
    assert (await members("vision"), await members("nlp")) == ([], [barbara])


async def test_a_sign_ins_state_works_once_only_in_its_browser_and_an_unknown_tenant_has_none(
    platform: Platform, dex: Provider, tmp_path: Path
) -> None:
    unknown = await platform.http.get(f"/v1/sso/{unique('t')}/start")
    assert_problem(unknown, 404)
    forged = await platform.http.get("/v1/sso/callback", params={"state": "x" * 43, "code": "c"})
    assert_problem(forged, 400)
    assert "expired or was already used" in forged.json()["detail"]

    # An attacker begins a sign-in and sends the victim its callback (login CSRF): the
    # victim's browser has no cookie of that sign-in, so it is refused.
    account = await _set_up(platform, dex, tmp_path)
    async with httpx.AsyncClient(base_url=platform.http.base_url) as attacker:
        begun = await attacker.get(f"/v1/sso/{account.tenant_id}/start")
        assert begun.status_code == 302
        state = parse_qs(urlsplit(begun.headers["location"]).query)["state"][0]
        cookie = begun.headers["set-cookie"].lower()
        assert "httponly" in cookie
        assert "samesite=lax" in cookie
        assert "max-age=600" in cookie
    victim = await platform.http.get("/v1/sso/callback", params={"state": state, "code": "c"})
    assert_problem(victim, 400)
    assert "began in another browser" in victim.json()["detail"]


async def test_a_provider_signs_in_no_user_of_another_tenant(
    platform: Platform, dex: Provider, chromium: Browser, tmp_path: Path
) -> None:
    """Linus is a user of another tenant; this tenant's provider vouches for his email
    all the same, and is refused: a tenant's provider speaks for its own users only."""
    elsewhere = await platform.tenant()
    made = await platform.http.post(
        "/v1/users", headers=bearer(elsewhere.admin_key),
        json={"email": dex.emails["linus"], "name": "Linus", "role": "tenant-admin"},
    )  # fmt: skip
    assert made.status_code == 201, made.text
    account = await _set_up(platform, dex, tmp_path)
    refused = await _sign_in(chromium, platform, account.tenant_id, dex.emails["linus"])
    await expect(refused.locator("body")).to_contain_text("the sign-in was refused")
    await refused.context.close()
    users = await platform.http.get("/v1/users", headers=bearer(account.admin_key))
    assert dex.emails["linus"] not in {user["email"] for user in users.json()}


async def test_the_cli_signs_in_with_a_code_entered_at_the_provider(
    platform: Platform, dex: Provider, chromium: Browser, tmp_path: Path
) -> None:
    # Off unless the admin allows it: a code can be phished.
    closed = await _set_up(platform, dex, tmp_path / "closed")
    cli = cli_for(tmp_path / "ada", platform)
    refused = await cli.run("login", "--endpoint", cli.endpoint, "--sso", closed.tenant_id)
    assert refused.code == 1
    assert "for the console only" in refused.err

    account = await _set_up(platform, dex, tmp_path, "--cli")
    login = await cli.start("login", "--endpoint", cli.endpoint, "--sso", account.tenant_id)
    await _enter_the_code(chromium, login, dex.emails["ada"])
    out, err = await asyncio.wait_for(login.communicate(), 60)
    assert login.returncode == 0, (out, err)
    assert f"you are {dex.emails['ada']} of {account.tenant_id}" in err.decode()
    who = (await cli.ok("-o", "json", "whoami")).json()
    assert (who["role"], who["tenantID"]) == ("tenant-user", account.tenant_id)
    keys = await platform.http.get("/v1/api-keys", headers=bearer(account.admin_key))
    [key] = [key for key in keys.json() if key["userID"] == who["userID"]]
    assert key["name"] == f"gpucloud CLI on {socket.gethostname()}"
    # Minted from a single sign-on, it lives a day at most: someone who leaves the
    # provider loses it within that (review N7).
    lives = datetime.fromisoformat(key["expiresAt"]) - datetime.fromisoformat(key["createdAt"])
    assert lives <= timedelta(days=1), lives
    # Nor does a key it mints outlive it: no way round the day.
    longer = (await cli.ok("-o", "json", "keys", "create", "ci", "--days", "300")).json()
    assert longer["expiresAt"] <= key["expiresAt"], (longer, key)


async def test_a_tenant_that_signs_in_through_its_provider_alone_refuses_passwords(
    platform: Platform, dex: Provider, tmp_path: Path
) -> None:
    account = await _set_up(platform, dex, tmp_path, "--sso-only")
    admin = cli_for(tmp_path / "admin", platform)
    assert (await admin.login(account.admin_key)).code == 0
    assert "refused" in (await admin.ok("sso", "show")).out  # PASSWORDS refused
    email, password = f"grace@{account.tenant_id}.test", "a long password of hers"
    made = await platform.http.post(
        "/v1/users", headers=bearer(account.admin_key),
        json={"email": email, "name": "Grace", "role": "tenant-user", "password": password},
    )  # fmt: skip
    assert made.status_code == 201, made.text
    refused = await platform.http.post("/v1/tokens", json={"email": email, "password": password})
    assert "signs in through its identity provider alone" in assert_problem(refused, 401)["detail"]
    console = await platform.http.post(
        "/v1/console/session", json={"email": email, "password": password}
    )
    assert_problem(console, 401)


async def _enter_the_code(chromium: Browser, cli: asyncio.subprocess.Process, email: str) -> None:
    """What the person at the CLI does: open the link it shows in a browser, and sign
    in at the provider with the code."""
    assert cli.stderr is not None
    shown = ""
    while (link := re.search(r"open\s+(\S+)\s+and enter the code (\S+) ", shown)) is None:
        line = await asyncio.wait_for(cli.stderr.readline(), 30)
        assert line, shown  # the CLI ended without showing the code
        shown += line.decode()
    context = await chromium.new_context()
    page = await context.new_page()
    await page.goto(link.group(1))
    await expect(page.locator("#user_code")).to_have_value(link.group(2))
    await page.get_by_role("button", name="Submit").click()
    await page.get_by_label("Email Address").fill(email)
    await page.get_by_label("Password").fill(PASSWORD)
    await page.get_by_role("button", name="Login").click()
    await expect(page.get_by_text("Login Successful")).to_be_visible(timeout=15_000)
    await context.close()


async def test_an_invitation_is_accepted_by_signing_in_at_the_provider(
    platform: Platform, dex: Provider, chromium: Browser, tmp_path: Path
) -> None:
    """A tenant that maps no group keeps roles to itself, and makes no user at a first
    sign-in: Joan is refused until invited; invited as a tenant admin, she joins from
    the link's page through the provider; Kay joins from the CLI with a code."""
    account = await platform.tenant()
    admin = cli_for(tmp_path / "admin", platform)
    assert (await admin.login(account.admin_key)).code == 0
    await admin.ok(
        "sso", "set", "--issuer", dex.issuer, "--client-id", "gpucloud", "--client-secret-stdin",
        "--no-new-users", "--cli", stdin=f"{CLIENT_SECRET}\n",
    )  # fmt: skip
    refused = await _sign_in(chromium, platform, account.tenant_id, dex.emails["joan"])
    await expect(refused.locator("body")).to_contain_text("the sign-in was refused")
    await refused.context.close()

    made = await admin.ok("invitations", "create", dex.emails["joan"], "--role", "tenant-admin")
    link = made.out.strip().splitlines()[-1]
    context = await chromium.new_context(base_url=str(platform.http.base_url))
    page = await context.new_page()
    await page.goto(link)
    await page.get_by_role("button", name="Join with single sign-on").click()
    await page.get_by_label("Email Address").fill(dex.emails["joan"])
    await page.get_by_label("Password").fill(PASSWORD)
    await page.get_by_role("button", name="Login").click()
    await expect(page.get_by_role("button", name="Sign out")).to_be_visible(timeout=15_000)
    who = (await (await page.request.get("/v1/console/session")).json())["principal"]
    assert (who["role"], who["tenantID"]) == ("tenant-admin", account.tenant_id)
    await context.close()

    made = await admin.ok("invitations", "create", dex.emails["kay"])
    kay = cli_for(tmp_path / "kay", platform)
    joining = await kay.start("join", made.out.strip().splitlines()[-1], "--sso")
    await _enter_the_code(chromium, joining, dex.emails["kay"])
    out, err = await asyncio.wait_for(joining.communicate(), 60)
    assert joining.returncode == 0, (out, err)
    me = (await kay.ok("-o", "json", "whoami")).json()
    assert (me["role"], me["tenantID"]) == ("tenant-user", account.tenant_id)
    shown = {
        i["email"]: i["status"] for i in (await admin.ok("-o", "json", "invitations", "ls")).json()
    }
    assert shown == {dex.emails["joan"]: "accepted", dex.emails["kay"]: "accepted"}
