"""The second cluster lost and found again: its API server paused (SIGSTOP, a network
partition as the platform sees it: connections open, no answers) while one instance
runs there and another is starting. Past the grace both fail as `cluster_lost`, the
running one billed exactly up to the first look that found the cluster silent; no
new workload goes there; once it answers again, their pods are deleted, and nothing
is billed twice."""

from __future__ import annotations

import os
import signal
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config

from gpucloud_libs.naming import tenant_namespace
from gpucloud_stack import layout

from .clusters_support import SECOND
from .platform import Platform, TenantAccount, bearer
from .support import eventually

B200 = "NVIDIA-B200"
SLEEP = {"command": ["sleep", "3600"]}


async def _instance(platform: Platform, account: TenantAccount, instance_id: str) -> dict[str, Any]:
    answer = await platform.http.get(
        f"/v1/gpu-instances/{instance_id}", headers=bearer(account.admin_key)
    )
    assert answer.status_code == 200, answer.text
    instance: dict[str, Any] = answer.json()
    return instance


async def _pods_in_second_cluster(namespace: str) -> list[str]:
    path = layout.etc_dir() / f"kubeconfig{layout.LOCAL_2.suffix}"
    api = await k8s_config.new_client_from_config(config_file=str(path))
    async with api:
        pods = await k8s.CoreV1Api(api).list_namespaced_pod(namespace)
        return [pod.metadata.name for pod in pods.items if pod.metadata.deletion_timestamp is None]


async def test_a_lost_cluster_fails_its_instances_bills_up_to_its_silence_and_leaves_no_pod(
    platform: Platform,
) -> None:
    account = await platform.tenant()
    spec = await platform.spec(gpus=8, gpu_type=B200)
    body = {"specName": spec, "image": "busybox", "template": SLEEP}
    started = await platform.start_instance(account, body)
    assert started.json()["cluster"] == SECOND, started.text
    running_id = started.json()["instanceID"]

    async def running() -> dict[str, Any] | None:
        instance = await _instance(platform, account, running_id)
        return instance if instance["state"] == "running" else None

    await eventually(running, timeout=60, interval=0.5)
    pid = int(layout.pid_file("kube-apiserver-local-2").read_text())
    os.kill(pid, signal.SIGSTOP)
    try:
        # Placed before any look found the cluster silent: it starts there, and hangs.
        starting = await platform.start_instance(account, body)
        assert starting.json()["cluster"] == SECOND, starting.text
        starting_id = starting.json()["instanceID"]

        async def both_lost() -> list[dict[str, Any]] | None:
            found = [await _instance(platform, account, i) for i in (running_id, starting_id)]
            return found if all(i["state"] == "failed" for i in found) else None

        lost_running, lost_starting = await eventually(both_lost, timeout=120, interval=1)
        assert (lost_running["reason"], lost_starting["reason"]) == ("cluster_lost",) * 2
        assert lost_running["message"].startswith(f"cluster '{SECOND}' stopped answering at ")
        cluster = (await platform.http.get(f"/v1/clusters/{SECOND}", headers=platform.admin)).json()
        assert cluster["health"]["reachable"] is False
        silent_since = datetime.fromisoformat(cluster["health"]["unreachableSince"])
        failed_at = datetime.fromisoformat(lost_running["history"][-1]["at"])
        assert failed_at == silent_since  # billed up to the first look that found it silent
        refused = await platform.start_instance(account, body)
        assert refused.status_code == 409, refused.text
        assert refused.json()["detail"] == (
            f"no cluster takes new workloads now: cluster '{SECOND}' is not answering"
        )
    finally:
        os.kill(pid, signal.SIGCONT)
    scheduled_at = datetime.fromisoformat(
        next(step["at"] for step in lost_running["history"] if step["state"] == "scheduled")
    )
    billed_us = 8 * round((failed_at - scheduled_at).total_seconds() * 1_000_000)

    async def back_and_swept() -> bool:
        answer = await platform.http.get(f"/v1/clusters/{SECOND}", headers=platform.admin)
        health = answer.json()["health"]
        namespace = tenant_namespace(account.tenant_id)
        return bool(health["reachable"]) and not await _pods_in_second_cluster(namespace)

    await eventually(back_and_swept, timeout=90, interval=1)
    for instance_id in (running_id, starting_id):
        after = await _instance(platform, account, instance_id)
        assert (after["state"], after["reason"]) == ("failed", "cluster_lost")  # not revived

    window = [(datetime.now(UTC) + timedelta(hours=h)).isoformat() for h in (-1, 1)]

    async def billed() -> dict[str, int] | None:
        response = await platform.http.get(
            "/v1/usage", headers=platform.admin, timeout=60,
            params={"tenantID": account.tenant_id, "groupBy": "instance",
                    "start": window[0], "end": window[1]},
        )  # fmt: skip
        rows = {row["key"]: row["gpuMicroseconds"] for row in response.json()["rows"]}
        return rows if running_id in rows else None

    usage = await eventually(billed, timeout=30, interval=1)
    assert usage[running_id] == billed_us
    assert usage.get(starting_id, 0) == 0  # never on a node
