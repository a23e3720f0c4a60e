""" "Open" on the local stack: an instance's URL is a `*.localhost` host on the gateway's
port, which a browser here resolves with no DNS, and it lands on the simulated node's
stand-in page at the pod's loopback address (kwok runs no container)."""

from __future__ import annotations

from typing import Any

from playwright.async_api import Browser

from .platform import Platform, bearer
from .support import eventually, unique, url_host, url_path


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

        async def landed() -> str | None:
            answer = await page.goto(link.json()["url"])
            text = await page.inner_text("body") if answer and answer.ok else ""
            return text if "Simulated workload" in text else None

        # The stand-in is up moments after the pod runs.
        text = await eventually(landed, timeout=30, interval=1)
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
