"""Placement across the local stack's two clusters, as a tenant sees it: a GPU type only
the second cluster has runs there; a region asked for is honoured, one with no cluster
or without the spec's GPUs refused with the regions that would do; the home cluster
cordoned sends the GPUs both have to the second; one quota across both; another
tenant sees nothing of it; and the CLI's `regions` and `--region`, and the log of an
instance in the second cluster, its usage by region and an SSH tunnel into it; and a
node of the second cluster quarantined there.

The second cluster's nodes are kwok's (deploy/local/fleet-local-2.toml: B200s and one
H100 node in zone-c), standing in for a second region's GPU servers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncssh
import httpx
import pytest
from kubernetes_asyncio import client as k8s
from playwright.async_api import Browser

from .cli_support import Ran, cli_for, ready_tenant
from .clusters_support import HOME, SECOND, second_cluster_api
from .platform import Platform, TenantAccount, bearer
from .support import eventually, stand_in_text

B200 = "NVIDIA-B200"
H100 = "NVIDIA-H100-80GB-HBM3"
SLEEP = {"command": ["sleep", "3600"]}


@pytest.fixture
async def home_active(platform: Platform) -> AsyncIterator[None]:
    yield
    await platform.http.post(f"/v1/clusters/{HOME}/uncordon", headers=platform.admin)


async def _running(platform: Platform, account: TenantAccount, instance_id: str) -> dict[str, Any]:
    async def running() -> dict[str, Any] | None:
        answer = await platform.http.get(
            f"/v1/gpu-instances/{instance_id}", headers=bearer(account.admin_key)
        )
        instance: dict[str, Any] = answer.json()
        assert instance["state"] not in ("failed", "stopped"), instance
        return instance if instance["state"] == "running" else None

    return await eventually(running, timeout=60, interval=0.5)


async def _stop(platform: Platform, account: TenantAccount, instance_id: str) -> None:
    """Stop it and wait until it has: the second cluster is removed and registered
    again by test_clusters.py, which needs no workload live in it."""
    user = bearer(account.admin_key)
    await platform.http.post(f"/v1/gpu-instances/{instance_id}/stop", headers=user)

    async def stopped() -> bool:
        answer = await platform.http.get(f"/v1/gpu-instances/{instance_id}", headers=user)
        return bool(answer.json()["state"] == "stopped")

    await eventually(stopped, timeout=60, interval=0.5)


async def _start(
    platform: Platform, account: TenantAccount, spec: str, **fields: Any
) -> httpx.Response:
    body = {"specName": spec, "image": "busybox", "template": SLEEP, **fields}
    return await platform.start_instance(account, body)


async def test_a_gpu_type_only_the_second_cluster_has_runs_there(platform: Platform) -> None:
    account = await platform.tenant()
    started = await _start(platform, account, await platform.spec(gpus=8, gpu_type=B200))
    assert started.status_code in (201, 202), started.text
    instance_id = started.json()["instanceID"]
    assert started.json()["cluster"] == SECOND
    instance = await _running(platform, account, instance_id)
    assert (instance["cluster"], instance["zone"]) == (SECOND, "zone-c")
    assert instance["node"].startswith("b200-")

    # The operator sees it counted against the second cluster, and free B200s fall.
    async def counted() -> dict[str, Any] | None:
        cluster = (await platform.http.get(f"/v1/clusters/{SECOND}", headers=platform.admin)).json()
        [b200] = [g for g in cluster["health"]["gpus"] if g["gpuType"] == B200]
        counted = b200["free"] is not None and b200["free"] <= 8  # once the watch is listed
        return cluster if cluster["workloads"] >= 1 and counted else None

    await eventually(counted, timeout=40, interval=1)
    await _stop(platform, account, instance_id)


async def test_a_region_asked_for_is_where_it_runs(platform: Platform) -> None:
    account = await platform.tenant()
    spec = await platform.spec(gpus=1, gpu_type=H100)
    there = await _start(platform, account, spec, region=SECOND)
    assert there.status_code in (201, 202), there.text
    home = await _start(platform, account, spec)
    assert home.status_code in (201, 202), home.text
    assert home.json()["cluster"] == HOME  # left to the platform: home first
    instance = await _running(platform, account, there.json()["instanceID"])
    assert (instance["cluster"], instance["zone"]) == (SECOND, "zone-c")
    assert instance["node"].startswith("h100-l2-")
    for created in (there, home):
        await _stop(platform, account, created.json()["instanceID"])


async def test_a_region_without_a_cluster_or_without_the_gpus_is_refused_with_the_choices(
    platform: Platform,
) -> None:
    account = await platform.tenant()
    nowhere = await _start(platform, account, await platform.spec(), region="mars-1")
    assert nowhere.status_code == 422, nowhere.text
    assert nowhere.headers["content-type"].startswith("application/problem+json")
    assert nowhere.json()["detail"] == (
        f"no cluster is in region 'mars-1'; the regions are {HOME}, {SECOND}"
    )
    b200 = await platform.spec(gpus=1, gpu_type=B200)
    lacking = await _start(platform, account, b200, region=HOME)
    assert lacking.status_code == 422, lacking.text
    assert lacking.json()["detail"] == (
        f"no cluster in region '{HOME}' has {B200} GPUs; region {SECOND} has them"
    )
    job = await platform.post_as_tenant(
        account, "/v1/jobs", {"specName": b200, "image": "busybox", "region": "mars-1"}
    )
    assert job.status_code == 422, job.text
    listed = await platform.http.get("/v1/gpu-instances", headers=bearer(account.admin_key))
    assert listed.json()["items"] == []  # nothing recorded by a refusal


async def test_a_cordoned_home_cluster_sends_gpus_both_have_to_the_second(
    platform: Platform, home_active: None
) -> None:
    account = await platform.tenant()
    spec = await platform.spec(gpus=1, gpu_type=H100)
    cordoned = await platform.http.post(f"/v1/clusters/{HOME}/cordon", headers=platform.admin)
    assert cordoned.status_code == 200, cordoned.text
    moved = await _start(platform, account, spec)
    assert moved.status_code in (201, 202), moved.text
    assert moved.json()["cluster"] == SECOND
    await _running(platform, account, moved.json()["instanceID"])
    await _stop(platform, account, moved.json()["instanceID"])


async def test_one_quota_spans_both_clusters_and_another_tenant_sees_nothing(
    platform: Platform,
) -> None:
    owner = await platform.tenant(max_gpus=9)
    b200 = await _start(platform, owner, await platform.spec(gpus=8, gpu_type=B200))
    assert b200.status_code in (201, 202), b200.text
    h100 = await platform.spec(gpus=1, gpu_type=H100)
    one = await _start(platform, owner, h100)
    assert (one.status_code in (201, 202), one.json()["cluster"]) == (True, HOME), one.text
    over = await _start(platform, owner, h100)
    assert over.status_code == 422, over.text
    assert over.json()["code"] == "quota_exceeded"
    other = await platform.tenant()
    seen = await platform.http.get("/v1/gpu-instances", headers=bearer(other.admin_key))
    assert seen.json()["items"] == []
    b200_id = b200.json()["instanceID"]
    for path in (f"/v1/gpu-instances/{b200_id}", f"/v1/gpu-instances/{b200_id}/logs"):
        answer = await platform.http.get(path, headers=bearer(other.admin_key))
        assert answer.status_code == 404, (path, answer.text)
    stop = await platform.http.post(
        f"/v1/gpu-instances/{b200_id}/stop", headers=bearer(other.admin_key)
    )
    assert stop.status_code == 404, stop.text
    for created in (b200, one):
        await _stop(platform, owner, created.json()["instanceID"])


async def test_a_user_lists_the_regions_and_starts_in_one_from_the_cli(
    platform: Platform, tmp_path: Path
) -> None:
    account = await platform.tenant()
    await ready_tenant(platform, account)
    cli = cli_for(tmp_path, platform)
    await cli.login(account.admin_key)
    listed = await cli.ok("regions")
    assert SECOND in listed.out
    assert B200 in listed.out
    regions = {r["name"]: r for r in (await cli.ok("-o", "json", "regions")).json()}
    assert regions[SECOND]["zones"] == ["zone-c"]
    assert {B200, H100} <= set(regions[SECOND]["gpuTypes"])
    spec = await platform.spec(gpus=1, gpu_type=H100)
    created = await cli.ok(
        "-o", "json", "instances", "create", "--spec", spec, "--image", "busybox",
        "--cmd", "sleep 3600", "--region", SECOND,
    )  # fmt: skip
    instance = created.json()
    assert (instance["cluster"], instance["state"], instance["zone"]) == (
        SECOND,
        "running",
        "zone-c",
    )
    # Its log is read from the cluster it runs in (kwok serves the simulated one).
    logged = await cli.ok("instances", "logs", instance["instanceID"], "--tail", "50")
    assert "gpucloud simulated workload: starting" in logged.out
    refused = await cli.run(
        "instances", "create", "--spec", spec, "--image", "busybox", "--region", "mars-1"
    )
    assert refused.code != 0
    assert "no cluster is in region 'mars-1'" in refused.err
    await _stop(platform, account, instance["instanceID"])

    # Its GPU time is billed under its region, for the tenant and for the operator.
    async def billed_by_region() -> dict[str, Any] | None:
        report = (await cli.ok("-o", "json", "usage", "--group-by", "region")).json()
        rows = {row["key"]: row for row in report["rows"]}
        return rows.get(SECOND) if set(rows) == {SECOND} else None

    assert (await eventually(billed_by_region, timeout=30, interval=1))["gpuMicroseconds"] > 0
    operator = cli_for(tmp_path / "operator", platform)
    assert (await operator.login(platform.admin_key)).code == 0
    revenue = await operator.ok("revenue", "--group-by", "region")
    assert "REGION" in revenue.out
    assert SECOND in revenue.out


async def test_an_instance_in_the_second_cluster_opens_through_the_gateway(
    platform: Platform, chromium: Browser
) -> None:
    """Its URL reaches its pod in the other cluster: here the stand-in the second
    fleet's simulated node serves at the pod's loopback address (127.96.x)."""
    account = await platform.tenant()
    spec = await platform.spec(gpus=1, gpu_type=B200)
    template = {**SLEEP, "ports": [{"port": 8888, "isPublic": True}]}
    started = await _start(platform, account, spec, template=template)
    assert started.json()["cluster"] == SECOND, started.text
    instance_id = started.json()["instanceID"]
    await _running(platform, account, instance_id)
    owner = bearer(account.admin_key)
    link = await platform.http.post(
        f"/v1/gpu-instances/{instance_id}/ports/8888/session", headers=owner
    )
    assert link.status_code == 200, link.text
    context = await chromium.new_context()
    page = await context.new_page()

    try:
        text = await stand_in_text(page, link.json()["url"])
        assert "b200-zone-c-" in text  # the node it runs on, in the second cluster
    finally:
        await context.close()
        await _stop(platform, account, instance_id)


async def test_the_second_clusters_nodes_report_telemetry_under_their_cluster(
    platform: Platform,
) -> None:
    """The second fleet's agent says its cluster; the monitoring service takes its
    nodes' telemetry because the instances service said they are that cluster's."""

    async def reported() -> list[dict[str, Any]] | None:
        nodes = (await platform.http.get("/v1/nodes", headers=platform.admin)).json()
        second = [n for n in nodes if n["node"].startswith(("b200-zone-c-", "h100-l2-"))]
        ready = len(second) == 3 and all(n["zone"] for n in second)
        return second if ready else None

    nodes = await eventually(reported, timeout=60, interval=1)
    assert {n["cluster"] for n in nodes} == {SECOND}
    assert {n["zone"] for n in nodes} == {"zone-c"}  # from its inventory: monitoring cannot ask
    assert {n["gpuType"] for n in nodes} == {B200, H100}


async def test_a_tunnel_reaches_an_instance_in_the_second_cluster(
    platform: Platform, tmp_path: Path
) -> None:
    """The CLI's SSH through the gateway's tunnel lands on the pod in the other
    cluster: here the SSH stand-in of the second fleet's simulated node, at the pod's
    loopback address (127.96.x)."""
    account = await platform.tenant()
    await ready_tenant(platform, account)
    cli = cli_for(tmp_path, platform)
    assert (await cli.login(account.admin_key)).code == 0
    key = tmp_path / "id_ed25519"
    private = asyncssh.generate_private_key("ssh-ed25519")
    private.write_private_key(str(key))
    key.chmod(0o600)
    private.write_public_key(f"{key}.pub")
    spec = await platform.spec(gpus=1, gpu_type=B200)
    created = await cli.ok(
        "-o", "json", "instances", "create", "--spec", spec, "--template", "ssh-devbox",
        "--public-key", f"{key}.pub", timeout=120,
    )  # fmt: skip
    instance = created.json()
    assert (instance["cluster"], instance["state"]) == (SECOND, "running"), instance
    known_hosts = tmp_path / "known_hosts"
    try:

        async def executed() -> Ran | None:
            # The stand-in comes up moments after the pod runs.
            ran = await cli.run("instances", "exec", instance["instanceID"], "-i", str(key),
                                "--ssh-option", f"UserKnownHostsFile={known_hosts}",
                                "--", "hostname")  # fmt: skip
            return ran if ran.code == 0 else None

        ran = await eventually(executed, timeout=30, interval=1)
        assert "runs on a simulated node (kwok)" in ran.out, ran
        assert "(stand-in) not run: hostname" in ran.out, ran
    finally:
        await _stop(platform, account, instance["instanceID"])


async def test_a_node_of_the_second_cluster_quarantined_from_the_cli_is_cordoned_there(
    platform: Platform, tmp_path: Path
) -> None:
    """Health-aware placement across clusters: the operator quarantines a B200 node of
    the second fleet; it is cordoned in its own cluster, whose free B200s the next look
    counts without it, until it is released."""
    node = "b200-zone-c-1"
    operator = cli_for(tmp_path, platform)
    assert (await operator.login(platform.admin_key)).code == 0

    async def free_b200() -> int:
        cluster = (await platform.http.get(f"/v1/clusters/{SECOND}", headers=platform.admin)).json()
        gpus = (cluster["health"] or {"gpus": []})["gpus"]
        return sum(g["free"] or 0 for g in gpus if g["gpuType"] == B200)

    async with second_cluster_api() as api:
        core = k8s.CoreV1Api(api)

        async def cordoned(wanted: bool) -> bool:
            return bool((await core.read_node(node)).spec.unschedulable) is wanted

        await operator.ok("fleet", "quarantine", node, "--reason", "fan replacement")
        try:
            await eventually(lambda: cordoned(True), timeout=30, interval=0.5)

            async def without_it() -> bool:
                return await free_b200() <= 8  # the other node's eight at most

            await eventually(without_it, timeout=60, interval=1)
        finally:
            await operator.ok("fleet", "release", node)
        await eventually(lambda: cordoned(False), timeout=30, interval=0.5)
