"""Warm stocks per cluster, as the operator keeps them from the CLI: a stock of an H100
spec in the second cluster is placed there (its hold pod in that cluster, none in the
home one), the cluster's view counts its ready unit, a tenant's start that names no
region goes where the warm unit is and runs from it, and a stock in a cluster that is
not registered is refused with the clusters there are.

The second cluster's H100 node is kwok's (deploy/local/fleet-local-2.toml), standing
in for a GPU server of a second region."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s

from .cli_support import Cli, cli_for
from .clusters_support import HOME, SECOND, second_cluster_api
from .platform import Platform, bearer
from .support import eventually

H100 = "NVIDIA-H100-80GB-HBM3"
STOCKS_NAMESPACE = "gpucloud-stocks"


@pytest.fixture
async def second_kube() -> AsyncIterator[k8s.ApiClient]:
    async with second_cluster_api() as api:
        yield api


async def _stock_pods(kube: k8s.ApiClient, spec: str) -> list[str]:
    pods = await k8s.CoreV1Api(kube).list_namespaced_pod(
        STOCKS_NAMESPACE, label_selector=f"gpucloud.io/stock={spec}"
    )
    return [pod.metadata.name for pod in pods.items]


async def _stock_row(cli: Cli, spec: str, cluster: str) -> dict[str, Any] | None:
    rows = (await cli.ok("-o", "json", "stocks", "ls")).json()
    return next((r for r in rows if (r["cluster"], r["specName"]) == (cluster, spec)), None)


async def test_a_stock_in_the_second_cluster_serves_starts_placed_there(
    platform: Platform, tmp_path: Path, kube: k8s.ApiClient, second_kube: k8s.ApiClient
) -> None:
    operator = cli_for(tmp_path / "operator", platform)
    assert (await operator.login(platform.admin_key)).code == 0
    spec = await platform.spec(gpus=1, gpu_type=H100)

    added = await operator.ok("stocks", "add", spec, "--cluster", SECOND)
    assert SECOND in added.out
    assert spec in added.out

    async def ready() -> dict[str, Any] | None:
        row = await _stock_row(operator, spec, SECOND)
        return row if row and (row["available"], row["placing"]) == (1, 0) else None

    try:
        assert (await eventually(ready, timeout=60, interval=0.5))["target"] == 1
        # The unit is held in the second cluster, none of it in the home one.
        [held] = await _stock_pods(second_kube, spec)
        assert held.endswith("-hold")
        assert await _stock_pods(kube, spec) == []
        assert await _stock_row(operator, spec, HOME) is None
        # A cluster that keeps a stock is not deleted under it.
        refused = await operator.run("clusters", "rm", SECOND, "--yes")
        assert refused.code != 0
        assert "still keeps 1 warm units; remove its stocks first" in refused.err

        # The operator's view of the cluster counts the ready unit once it is looked at.
        async def counted() -> bool:
            answer = await platform.http.get(f"/v1/clusters/{SECOND}", headers=platform.admin)
            health = answer.json()["health"] or {}
            return bool(health.get("warm", {}).get(spec) == 1)

        await eventually(counted, timeout=60, interval=0.5)

        # A start naming no region goes where the warm unit is, and runs from it, though
        # the home cluster has H100s too.
        account = await platform.tenant()
        body = {"specName": spec, "image": "busybox", "template": {"command": ["sleep", "3600"]}}
        started = await platform.start_instance(account, body)
        assert started.status_code in (201, 202), started.text
        assert started.json()["cluster"] == SECOND
        instance_id = started.json()["instanceID"]
        user = bearer(account.admin_key)

        async def running() -> dict[str, Any] | None:
            answer = await platform.http.get(f"/v1/gpu-instances/{instance_id}", headers=user)
            instance: dict[str, Any] = answer.json()
            assert instance["state"] not in ("failed", "stopped"), instance
            return instance if instance["state"] == "running" else None

        instance = await eventually(running, timeout=60, interval=0.5)
        assert (instance["cluster"], instance["fromStock"]) == (SECOND, True)
        assert instance["node"].startswith("h100-l2")
        await platform.http.post(f"/v1/gpu-instances/{instance_id}/stop", headers=user)

        async def stopped() -> bool:
            answer = await platform.http.get(f"/v1/gpu-instances/{instance_id}", headers=user)
            return bool(answer.json()["state"] == "stopped")

        await eventually(stopped, timeout=60, interval=0.5)
    finally:
        removed = await operator.ok("-o", "json", "stocks", "remove", spec, "--cluster", SECOND)
        assert removed.json()["target"] == 0

    async def gone() -> bool:
        return await _stock_pods(second_kube, spec) == []

    await eventually(gone, timeout=60, interval=0.5)


async def test_a_stock_in_a_cluster_not_registered_is_refused_with_the_clusters(
    platform: Platform, tmp_path: Path
) -> None:
    operator = cli_for(tmp_path, platform)
    assert (await operator.login(platform.admin_key)).code == 0
    spec = await platform.spec(gpus=1, gpu_type=H100)
    refused = await operator.run("stocks", "add", spec, "--cluster", "nowhere")
    assert refused.code != 0
    assert "no cluster is named 'nowhere'" in refused.err
    assert HOME in refused.err
    assert SECOND in refused.err
    assert await _stock_row(operator, spec, "nowhere") is None
