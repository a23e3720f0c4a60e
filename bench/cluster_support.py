"""The local stack's two clusters, as the benchmarks reach them: the second one's API,
and the leader's record of what each offers."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config

if TYPE_CHECKING:
    from .instance_start import Bench

HOME, SECOND = "local-1", "local-2"
#: How long the leader may take to look at the clusters again (its resync, 15 s).
LOOK_WAIT_S = 60.0


async def second_cluster_client(env: dict[str, str]) -> k8s.ApiClient:
    """The second cluster's API, with the operator's kubeconfig of it."""
    configuration = k8s.Configuration()
    path = Path(env["GPUCLOUD_KUBECONFIG"]).with_name(f"kubeconfig-{SECOND}")
    await k8s_config.load_kube_config(config_file=str(path), client_configuration=configuration)
    return k8s.ApiClient(configuration)


async def clusters(bench: Bench) -> list[dict[str, Any]]:
    answer = await bench.http.get("/clusters", auth=bench.auth("platform-admin"))
    answer.raise_for_status()
    found: list[dict[str, Any]] = answer.json()
    return found


async def wait_offered(bench: Bench, product: str, where: set[str]) -> None:
    """Until the leader's looks record the product's GPUs in each of `where`."""
    deadline = time.monotonic() + LOOK_WAIT_S
    while time.monotonic() < deadline:
        offering = {
            cluster["name"]
            for cluster in await clusters(bench)
            if any(g["gpuType"] == product for g in (cluster["health"] or {"gpus": []})["gpus"])
        }
        if where <= offering:
            return
        await asyncio.sleep(1)
    raise RuntimeError(f"{product} is not recorded in {sorted(where)} after {LOOK_WAIT_S:.0f}s")
