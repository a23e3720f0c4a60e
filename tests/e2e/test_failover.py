"""Two replicas of the instances service, each behind a gateway of its own, and the
controller's leader killed in the middle of a burst of starts (bench/failover.py
runs the replicas; the stack's own instances process is paused meanwhile). The
other replica must lead within the lease; every acknowledged start runs, once; no
pod is without its record; each instance is billed exactly its recorded time; and
a replica that comes back answers lists and reads as the survivor does."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

import httpx
import pytest
from kubernetes_asyncio import client as k8s

from bench.failover import (
    LEASE_DURATION_S,
    all_running,
    burst_with_a_leader_kill,
    start_replica,
    two_replicas,
)
from gpucloud_instances.controller.lease import Lease, LeaseLost
from gpucloud_libs.kube import KubeClient
from gpucloud_libs.naming import tenant_namespace
from gpucloud_metering import ledger

from .platform import Platform, bearer
from .support import eventually, unique

STARTS = 24


async def test_a_killed_leader_hands_over_and_no_start_is_lost_or_doubled(
    platform: Platform, kube: k8s.ApiClient
) -> None:
    account = await platform.tenant(max_gpus=STARTS, max_instances=STARTS)
    spec = await platform.spec(gpus=1)
    headers = bearer(account.admin_key)
    # The tenant is known to the instances service before its process is paused.
    warm = await platform.start_instance(account, {"image": "busybox", "specName": spec})
    assert warm.status_code == 202, warm.text
    warm_id = warm.json()["instanceID"]
    await platform.http.delete(f"/v1/gpu-instances/{warm_id}", headers=headers)

    async with two_replicas() as replicas, httpx.AsyncClient(timeout=30) as http:
        acknowledged, takeover_s, survivor = await burst_with_a_leader_kill(
            kube, replicas, headers, spec, STARTS
        )
        assert takeover_s <= LEASE_DURATION_S + 3, takeover_s
        assert len(acknowledged) >= STARTS // 2, acknowledged  # the survivor's half at least
        await all_running(http, survivor.url, headers, acknowledged, timeout_s=60)

        listed = await _listed(http, survivor.url, headers, but=warm_id)
        assert set(acknowledged) <= set(listed)
        for instance_id in listed:
            states = [step["state"] for step in listed[instance_id]["history"]]
            assert states.count("running") <= 1, (instance_id, states)
        for instance_id in acknowledged:
            assert [s["state"] for s in listed[instance_id]["history"]].count("running") == 1

        pods = await k8s.CoreV1Api(kube).list_namespaced_pod(
            tenant_namespace(account.tenant_id), label_selector="gpucloud.io/instance"
        )
        owners = [pod.metadata.labels["gpucloud.io/instance"] for pod in pods.items]
        assert len(owners) == len(set(owners)), owners  # one pod an instance
        assert set(owners) - {warm_id} <= set(listed), set(owners) - set(listed)  # no orphan

        # The killed replica comes back, a follower: it answers as the survivor does.
        back = await start_replica(f"{replicas[0].name}-back")
        try:
            assert await _listed(http, back.url, headers, but=warm_id) == listed
            one = acknowledged[0]
            read = await http.get(f"{back.url}/v1/gpu-instances/{one}", headers=headers)
            assert read.json() == listed[one]
        finally:
            back.stop()

        for instance_id in listed:
            await http.post(f"{survivor.url}/v1/gpu-instances/{instance_id}/stop", headers=headers)

        async def stopped() -> dict[str, Any] | None:
            now = await _listed(http, survivor.url, headers, but=warm_id)
            return now if all(i["state"] == "stopped" for i in now.values()) else None

        ended = await eventually(stopped, timeout=60)

    # Billed exactly what each record shows it held, once: from scheduled to stopped.
    expected = {
        instance_id: _us(_at(instance, "stopped")) - _us(_at(instance, "scheduled"))
        for instance_id, instance in ended.items()
        if any(step["state"] == "scheduled" for step in instance["history"])
    }

    async def billed() -> dict[str, int] | None:
        usage = await platform.http.get(
            "/v1/usage", params={"groupBy": "instance"}, headers=headers, timeout=60
        )
        rows = {row["key"]: row["gpuMicroseconds"] for row in usage.json()["rows"]}
        return rows if all(rows.get(key) == value for key, value in expected.items()) else None

    try:
        await eventually(billed, timeout=60)
    except AssertionError:
        usage = await platform.http.get(
            "/v1/usage", params={"groupBy": "instance"}, headers=headers
        )
        rows = {row["key"]: row["gpuMicroseconds"] for row in usage.json()["rows"]}
        assert {key: rows.get(key) for key in expected} == expected


async def _listed(
    http: httpx.AsyncClient, url: str, headers: dict[str, str], *, but: str
) -> dict[str, Any]:
    """The tenant's instances as `url` lists them, all but the one started before."""
    listed = await http.get(f"{url}/v1/gpu-instances", params={"limit": 200}, headers=headers)
    assert listed.status_code == 200, listed.text
    return {
        item["instanceID"]: item for item in listed.json()["items"] if item["instanceID"] != but
    }


def _at(instance: dict[str, Any], state: str) -> str:
    return str(next(step["at"] for step in instance["history"] if step["state"] == state))


def _us(at: str) -> int:
    return ledger.to_us(datetime.fromisoformat(at.replace("Z", "+00:00")))


async def test_a_leader_frozen_past_its_lease_stops_acting_before_it_renews(
    stack_env: dict[str, str],
) -> None:
    """A process stopped longer than its lease (a paused VM) resumes stale: another
    replica may lead. It must count itself leader no longer, by its own clock, and its
    renewal loop must end the lead, without waiting to read the Lease."""
    client = KubeClient(stack_env["GPUCLOUD_KUBECONFIG"])
    await client.connect()
    lease = Lease(client, namespace=unique("gpc-lease"), holder="frozen", duration_s=3)
    try:
        assert await lease.acquire()
        assert lease.fresh()
        lease._renewed_at -= 10  # as if the process had been stopped for 10 s
        assert not lease.fresh()
        with pytest.raises(LeaseLost):
            await asyncio.wait_for(lease.renew_forever(), timeout=5)
        assert not lease.held
    finally:
        await client.delete("Namespace", None, lease._namespace)
        await client.close()
