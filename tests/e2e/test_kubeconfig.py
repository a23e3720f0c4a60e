"""kubectl for a tenant's namespace (issue "Tenant self-service", item 5): a user's
`gpucloud kubeconfig` credential, used by the real kubectl against the real API
server, lists its namespace's pods and is refused in another tenant's namespace and
the cluster's own; it creates no pod and reads no Secret; it stops working when the
user is removed."""

from __future__ import annotations

import asyncio
from pathlib import Path

from gpucloud_libs.naming import tenant_namespace

from .cli_support import cli_for, kubectl
from .platform import Platform, assert_problem, bearer
from .support import eventually


async def test_a_users_kubectl_sees_its_namespace_only_and_ends_with_the_user(
    platform: Platform, tmp_path: Path
) -> None:
    account = await platform.tenant()
    stranger = await platform.tenant()
    user_id, _, key = await platform.member(account)
    spec = await platform.spec()
    started = await platform.start_instance(account, {"image": "busybox", "specName": spec})
    assert started.status_code == 202, started.text
    instance_id = started.json()["instanceID"]

    cli = cli_for(tmp_path / "ada", platform)
    assert (await cli.login(key)).code == 0
    kubeconfig = tmp_path / "kube" / "config"
    # A second one, as every later one, is issued for the same account.
    await cli.ok("kubeconfig")
    written = await cli.ok("kubeconfig", "--hours", "2", "--file", str(kubeconfig))
    assert f"namespace {tenant_namespace(account.tenant_id)}" in written.err
    assert kubeconfig.stat().st_mode & 0o777 == 0o600

    async def pod_listed() -> str | None:
        code, out = await kubectl(kubeconfig, "get", "pods", "-o", "name")
        assert code == 0, out
        return out if instance_id in out else None

    await eventually(pod_listed, timeout=60)
    events = await kubectl(kubeconfig, "get", "events")
    assert events[0] == 0, events
    for namespace in (tenant_namespace(stranger.tenant_id), "kube-system", "gpucloud-stocks"):
        code, out = await kubectl(kubeconfig, "get", "pods", "-n", namespace)
        assert code == 1
        assert "forbidden" in out.lower(), out
    # No pod of its own (it would escape quota, placement and billing), no Secret.
    for denied in (("create", "pods"), ("get", "secrets"), ("create", "deployments")):
        code, out = await kubectl(kubeconfig, "auth", "can-i", *denied)
        assert out.strip() == "no", (denied, out)
    for verb, sub in (("create", "exec"), ("create", "portforward"), ("get", "log")):
        code, out = await kubectl(kubeconfig, "auth", "can-i", verb, "pods", "--subresource", sub)
        assert out.strip() == "yes", (sub, out)
    code, out = await kubectl(kubeconfig, "run", "mine", "--image", "busybox")
    assert code == 1
    assert "forbidden" in out.lower(), out

    # Removed, the user's credential stops: their account is gone with its tokens.
    removed = await platform.http.delete(f"/v1/users/{user_id}", headers=bearer(account.admin_key))
    assert removed.status_code == 204, removed.text

    async def refused() -> bool:
        code, out = await kubectl(kubeconfig, "get", "pods")
        return code == 1 and "unauthorized" in out.lower()

    await eventually(refused, timeout=30, interval=1)


async def test_a_kubeconfig_is_a_users_and_asks_for_hours_within_bounds(
    platform: Platform,
) -> None:
    account = await platform.tenant()
    too_long = await platform.http.post(
        "/v1/kubeconfig", json={"hours": 48}, headers=bearer(account.admin_key)
    )
    assert_problem(too_long, 422)
    # The platform's operator has no tenant namespace to get one for.
    operator = await platform.http.post("/v1/kubeconfig", json={}, headers=platform.admin)
    assert_problem(operator, 403)


async def _kubeconfig_of(platform: Platform, key: str, path: Path) -> Path:
    """A kubeconfig minted with `key`, written to `path`, once kubectl can use it."""
    issued = await platform.http.post("/v1/kubeconfig", json={}, headers=bearer(key))
    assert issued.status_code == 201, issued.text
    await asyncio.to_thread(path.write_text, issued.json()["kubeconfig"])

    async def usable() -> bool:
        code, _ = await kubectl(path, "get", "pods")
        return code == 0

    await eventually(usable, timeout=30, interval=1)
    return path


async def _refused(kubeconfig: Path) -> None:
    async def refused() -> bool:
        code, out = await kubectl(kubeconfig, "get", "pods")
        return code == 1 and "unauthorized" in out.lower()

    await eventually(refused, timeout=30, interval=1)


async def test_a_kubectl_credential_ends_with_the_key_password_or_tenant_that_allowed_it(
    platform: Platform, tmp_path: Path
) -> None:
    """Review N4: what a key minted ends when the key is revoked; what a password's
    token minted, when the password changes; everything, when the tenant is suspended."""
    account = await platform.tenant()
    admin = bearer(account.admin_key)
    _, key_id, key = await platform.member(account)
    by_key = await _kubeconfig_of(platform, key, tmp_path / "by-key")
    revoked = await platform.http.delete(f"/v1/api-keys/{key_id}", headers=bearer(key))
    assert revoked.status_code in {200, 204}, revoked.text
    await _refused(by_key)

    email, password = f"ada@{account.tenant_id}.test", "a first long password"
    made = await platform.http.post(
        "/v1/users", headers=admin,
        json={"email": email, "name": "Ada", "role": "tenant-user", "password": password},
    )  # fmt: skip
    assert made.status_code == 201, made.text
    token = await platform.http.post("/v1/tokens", json={"email": email, "password": password})
    by_password = await _kubeconfig_of(platform, token.json()["token"], tmp_path / "by-password")
    changed = await platform.http.patch(
        f"/v1/users/{made.json()['userID']}", json={"password": "a second long password"},
        headers=admin,
    )  # fmt: skip
    assert changed.status_code == 200, changed.text
    await _refused(by_password)

    _, _, other_key = await platform.member(account)
    by_member = await _kubeconfig_of(platform, other_key, tmp_path / "by-member")
    suspended = await platform.http.patch(
        f"/v1/tenants/{account.tenant_id}", json={"status": "suspended"}, headers=platform.admin
    )
    assert suspended.status_code == 200, suspended.text
    await _refused(by_member)
    assert_problem(
        await platform.http.post("/v1/kubeconfig", json={}, headers=bearer(other_key)), 403
    )
