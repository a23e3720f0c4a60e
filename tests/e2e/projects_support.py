"""What the projects' tests share: a tenant with a user, and a start in a project."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from playwright.async_api import Browser, BrowserContext, Page

from .cli_support import Cli, cli_for
from .platform import Platform, TenantAccount
from .support import eventually, sign_in_with_key


async def started_in_vision(cli: Cli, spec: str) -> dict[str, Any]:
    """An instance started in `vision`, once the project (or the caller's membership)
    reached the instances service with the tenant's next event."""

    async def started() -> dict[str, Any] | None:
        ran = await cli.run("-o", "json", "instances", "create", "--spec", spec, "--image",
                            "busybox", "--project", "vision", "--no-wait")  # fmt: skip
        return dict(ran.json()) if ran.code == 0 else None

    return await eventually(started, timeout=30)


async def tenant_with_ada(platform: Platform, tmp_path: Path) -> tuple[TenantAccount, Cli, Cli]:
    """A tenant of 16 GPUs with a user, Ada: the admin's CLI and Ada's."""
    account = await platform.tenant(max_gpus=16)
    admin = cli_for(tmp_path / "admin", platform)
    assert (await admin.login(account.admin_key)).code == 0
    email = f"ada@{account.tenant_id}.test"
    await admin.ok("users", "add", email, "--name", "Ada")
    minted = await admin.ok("-o", "json", "users", "key", email, "--name", "laptop")
    ada = cli_for(tmp_path / "ada", platform)
    assert (await ada.login(minted.json()["secret"])).code == 0
    return account, admin, ada


async def member_in_console(
    platform: Platform, chromium: Browser, tmp_path: Path
) -> tuple[TenantAccount, Cli, BrowserContext, Page]:
    """Ada, a member of `vision` (2 GPUs), signed in to the console with a key her
    admin minted: the tenant, the admin's CLI, and her browser context and page."""
    account, admin, _ = await tenant_with_ada(platform, tmp_path)
    await admin.ok("projects", "create", "vision", "--gpus", "2")
    await admin.ok("projects", "add-member", "vision", f"ada@{account.tenant_id}.test")
    minted = (await admin.ok("-o", "json", "users", "key", f"ada@{account.tenant_id}.test",
                             "--name", "console")).json()  # fmt: skip
    context = await chromium.new_context(base_url=str(platform.http.base_url))
    page = await context.new_page()
    await sign_in_with_key(page, minted["secret"])
    return account, admin, context, page
