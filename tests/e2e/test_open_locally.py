""" "Open" on the local stack: an instance's URL is a `*.localhost` host on the gateway's
port, which a browser here resolves with no DNS, and it lands on the simulated node's
stand-in page at the pod's loopback address (kwok runs no container); an ssh-devbox's
SSH port reaches the node's SSH stand-in the same way."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import asyncssh
from playwright.async_api import Browser

from .cli_support import Ran, cli_for, ready_tenant, ssh_through
from .platform import Platform, bearer
from .support import eventually, stand_in_text, unique, url_host, url_path


async def test_open_lands_on_the_instance_through_the_gateway(
    platform: Platform, chromium: Browser, stack_env: dict[str, str]
) -> None:
    account = await platform.tenant()
    spec = await platform.spec()  # the fleet's H100s: simulated nodes, served stand-ins
    body = {"instanceID": unique("nb"), "image": "jupyter/base-notebook", "specName": spec,
            "template": {"command": ["start-notebook.py"], "args": ["--IdentityProvider.token=''"],
                         "ports": [{"port": 8888, "isPublic": True}]}}  # fmt: skip
    started = await platform.start_instance(account, body)
    assert started.status_code == 202, started.text
    instance_id = started.json()["instanceID"]
    owner = bearer(account.admin_key)

    async def running() -> dict[str, Any] | None:
        got = (await platform.http.get(f"/v1/gpu-instances/{instance_id}", headers=owner)).json()
        return got if got["state"] == "running" else None

    instance = await eventually(running, timeout=60)
    [url] = instance["urls"]
    gateway_port = stack_env["GPUCLOUD_GATEWAY_URL"].rsplit(":", 1)[1].rstrip("/")
    assert url.startswith("http://")
    assert url_host(url).endswith(f".instances.localhost:{gateway_port}")
    try:
        link = await platform.http.post(
            f"/v1/gpu-instances/{instance_id}/ports/8888/session", headers=owner
        )
        assert link.status_code == 200, link.text
        assert url_host(link.json()["url"]) == url_host(url)

        # What the console's "Open" does: the browser follows the one-minute link, gets
        # the instance's cookie, and lands on the workload (here, its stand-in).
        context = await chromium.new_context()
        page = await context.new_page()

        text = await stand_in_text(page, link.json()["url"])
        assert url_path(page.url) == "/"
        assert "jupyter/base-notebook" in text
        assert "start-notebook.py" in text
        assert "8888" in text
        assert "nvidia.com/gpu" in text
        cookies = await context.cookies()
        assert [c["name"] for c in cookies] == ["__Host-gpucloud_session"]
        # The cookie is the instance's own: another page of it needs no link.
        again = await page.goto(url.rstrip("/") + "/lab")
        assert again is not None
        assert again.ok
        await context.close()
    finally:
        await platform.http.delete(f"/v1/gpu-instances/{instance_id}", headers=owner)


async def test_ssh_and_exec_reach_an_ssh_devbox_on_the_local_stack(
    platform: Platform, tmp_path: Path
) -> None:
    """The catalog's ssh-devbox, started from the CLI with the user's public key on the
    stack's simulated fleet: `gpucloud ssh` and `instances exec` reach the simulated
    node's SSH stand-in through the gateway's tunnel, with that key and no other."""
    account = await platform.tenant()
    spec = await platform.spec()  # the fleet's H100s: simulated nodes, served stand-ins
    await ready_tenant(platform, account)
    cli = cli_for(tmp_path, platform)
    assert (await cli.login(account.admin_key)).code == 0
    key, stranger = tmp_path / "id_ed25519", tmp_path / "stranger"
    for path in (key, stranger):
        private = asyncssh.generate_private_key("ssh-ed25519")
        private.write_private_key(str(path))
        path.chmod(0o600)  # ssh refuses a private key others may read
        private.write_public_key(f"{path}.pub")
    created = await cli.ok(
        "-o", "json", "instances", "create", "--spec", spec, "--template", "ssh-devbox",
        "--public-key", f"{key}.pub", timeout=120,
    )  # fmt: skip
    instance = created.json()
    assert instance["state"] == "running", instance
    # Host keys go to the test's own file, never the user's ~/.ssh.
    known_hosts = tmp_path / "known_hosts"
    home = ["-o", f"UserKnownHostsFile={known_hosts}", "-o", "LogLevel=ERROR"]
    try:

        async def executed() -> Ran | None:
            # The stand-in comes up moments after the pod runs.
            ran = await cli.run("instances", "exec", instance["instanceID"], "-i", str(key),
                                "--ssh-option", f"UserKnownHostsFile={known_hosts}",
                                "--", "nvidia-smi", "-L")  # fmt: skip
            return ran if ran.code == 0 else None

        ran = await eventually(executed, timeout=30, interval=1)
        assert "runs on a simulated node (kwok)" in ran.out, ran
        assert "(stand-in) not run: nvidia-smi -L" in ran.out, ran

        async def ssh_with(identity: Path) -> Ran:
            return await cli.run(
                "ssh", instance["instanceID"], "--", "-i", str(identity), "-o", "IdentitiesOnly=yes",
                "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=accept-new", *home, "echo hi",
            )  # fmt: skip

        logged_in = await ssh_with(key)
        assert logged_in.code == 0, logged_in
        assert "(stand-in) not run: echo hi" in logged_in.out, logged_in
        # Another key is refused, as the image's sshd refuses it: ssh exits 255.
        refused = await ssh_with(stranger)
        assert refused.code == 255, refused
        assert "Permission denied (publickey)" in refused.err, refused

        # The printed host block logs in with that key alone, for plain ssh.
        printed = await cli.ok("instances", "ssh-config", instance["instanceID"], "-i", str(key))
        assert printed.out.splitlines()[-2:] == [f'  IdentityFile "{key}"', "  IdentitiesOnly yes"]
        config = tmp_path / "ssh_config"
        config.write_text(printed.out + f"\n  UserKnownHostsFile {known_hosts}\n"
                          "  StrictHostKeyChecking accept-new\n  BatchMode yes\n  LogLevel ERROR\n")  # fmt: skip
        plain = await ssh_through(config, f"gpc-{instance['instanceID']}", "echo hi", cli.env)
        assert plain.code == 0, plain
        assert "(stand-in) not run: echo hi" in plain.out
    finally:
        await cli.run("instances", "stop", instance["instanceID"])
