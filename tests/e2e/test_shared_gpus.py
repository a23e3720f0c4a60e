"""Shared GPUs on the real stack: MIG slices and time-sliced replicas, as NVIDIA's device
plugin advertises them on the fleet's `a100-mig` and `l40s-shared` kwok nodes
(deploy/local/fleet.toml). A spec asks for either; quota, placement and billing weigh
each unit as the part of a GPU it is. The pure rules are
tests/unit/instances/test_shared_gpu_units.py."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction
from typing import Any, NamedTuple

import pytest
from kubernetes_asyncio import client as k8s

from gpucloud_agent.simulated import SimulatedFleet, model_memory_mib
from gpucloud_agent.simulated_telemetry import sync_fleet
from gpucloud_libs.kube import KubeClient
from gpucloud_libs.naming import tenant_namespace

from .platform import Platform, TenantAccount, assert_problem, bearer
from .support import eventually, unique
from .test_jobs import job_body, settled, submit, us

A100 = "NVIDIA-A100-SXM4-40GB"
L40S_SHARED = "NVIDIA-L40S-SHARED"  # GPU feature discovery's product label, time-sliced


async def shared_spec(platform: Platform, **fields: Any) -> dict[str, Any]:
    body = {"name": unique("spec"), "cpu": "4", "memory": "16Gi", **fields}
    response = await platform.http.post("/v1/specs", json=body, headers=platform.admin)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


async def test_a_spec_says_its_gpu_kind_and_weight_and_bad_ones_are_refused(
    platform: Platform,
) -> None:
    mig = await shared_spec(platform, gpuType=A100, gpuNum=2, gpuSharing="mig", migProfile="1g.5gb")
    assert (mig["gpuResource"], mig["gpuWeight"]) == ("nvidia.com/mig-1g.5gb", "1/7")
    sliced = await shared_spec(
        platform, gpuType=L40S_SHARED, gpuNum=1, gpuSharing="time-sliced", timeSlicingReplicas=4
    )
    assert (sliced["gpuResource"], sliced["gpuWeight"]) == ("nvidia.com/gpu.shared", "1/4")
    read = await platform.http.get(f"/v1/specs/{sliced['name']}", headers=platform.admin)
    assert read.json()["timeSlicingReplicas"] == 4

    for wrong in (
        {"gpuSharing": "mig"},  # no profile
        {"gpuSharing": "mig", "migProfile": "9g.5gb"},
        {"migProfile": "1g.5gb"},  # a profile, but whole GPUs
        {"gpuSharing": "time-sliced", "timeSlicingReplicas": 4, "gpuNum": 2},
        {"gpuSharing": "time-sliced", "timeSlicingReplicas": 1},
    ):
        body = {"name": unique("spec"), "cpu": "4", "memory": "16Gi", "gpuType": A100,
                "gpuNum": 1, **wrong}  # fmt: skip
        response = await platform.http.post("/v1/specs", json=body, headers=platform.admin)
        assert_problem(response, 422, "validation_failed")

    # A stock's start skips the scheduler, which alone keeps a time-sliced node to one
    # tenant: no stock for such a spec.
    stock = await platform.http.post(
        "/v1/stocks",
        json={"number": 1, "operationID": unique("op"), "specName": sliced["name"]},
        headers=platform.admin,
    )
    assert_problem(stock, 422, "validation_failed")


class SharedKind(NamedTuple):
    spec: dict[str, Any]
    node: str  # the fleet's one node of the kind
    resource: str
    weight: Fraction


SHARED_KINDS = {
    "mig": SharedKind(
        {"gpuType": A100, "gpuNum": 2, "gpuSharing": "mig", "migProfile": "1g.5gb"},
        "a100-mig-zone-a-0", "nvidia.com/mig-1g.5gb", Fraction(1, 7),
    ),
    "time-sliced": SharedKind(
        {"gpuType": L40S_SHARED, "gpuNum": 1, "gpuSharing": "time-sliced",
         "timeSlicingReplicas": 4},
        "l40s-shared-zone-a-0", "nvidia.com/gpu.shared", Fraction(1, 4),
    ),
}  # fmt: skip


@pytest.mark.parametrize("kind", SHARED_KINDS)
async def test_a_shared_gpu_job_runs_on_its_units_and_is_billed_at_their_weight(
    platform: Platform, kube: k8s.ApiClient, kind: str
) -> None:
    fields, node, resource, weight = SHARED_KINDS[kind]
    units: int = fields["gpuNum"]
    spec = await shared_spec(platform, **fields)
    price = await platform.http.post(
        "/v1/prices",
        json={"meter": "gpu_hour", "specName": spec["name"], "amount": "0.90"},
        headers=platform.admin,
    )
    assert price.status_code == 201, price.text
    # Its units weigh less than a GPU: a tenant of one GPU runs it.
    account = await platform.tenant(max_gpus=1)
    job_id = await submit(platform, account, job_body(spec["name"], run_for="2s"))

    done = await settled(platform, account, job_id)

    assert done["state"] == "succeeded", done
    [run] = done["runs"]
    assert run["node"] == node
    pods = await k8s.CoreV1Api(kube).list_namespaced_pod(
        tenant_namespace(account.tenant_id), label_selector=f"gpucloud.io/job={job_id}"
    )
    [pod] = pods.items
    assert pod.spec.containers[0].resources.requests[resource] == str(units)
    assert "nvidia.com/gpu" not in pod.spec.containers[0].resources.requests
    held_us = us(run["endedAt"]) - us(run["scheduledAt"])

    async def billed() -> dict[str, Any] | None:
        usage = await platform.http.get(
            f"/v1/usage/jobs/{job_id}", headers=bearer(account.admin_key)
        )
        total = usage.json().get("total", {}) if usage.status_code == 200 else {}
        return usage.json() if total.get("sliceMicroseconds") == units * held_us else None

    report = await eventually(billed, timeout=30)
    total = report["total"]
    # GPU time at the units' weight; the price is per unit-hour.
    assert total["gpuMicroseconds"] == int(units * held_us * weight)
    # Priced from the price's first moment on: a run's start is Kubernetes' timestamp,
    # to the second, so it may come before it.
    priced_us = us(run["endedAt"]) - max(us(run["scheduledAt"]), us(price.json()["effectiveFrom"]))
    assert (
        Decimal(str(total["amount"]))
        == Decimal(units * priced_us) * Decimal("0.90") / 3_600_000_000
    )


async def instance_on(
    platform: Platform, account: TenantAccount, spec: str, state: str
) -> dict[str, Any]:
    response = await platform.start_instance(account, {"image": "pause", "specName": spec})
    assert response.status_code in (200, 201, 202), response.text
    instance_id = response.json()["instanceID"]

    async def reached() -> dict[str, Any] | None:
        found = await platform.http.get(
            f"/v1/gpu-instances/{instance_id}", headers=bearer(account.admin_key)
        )
        body: dict[str, Any] = found.json()
        return body if body["state"] == state else None

    return await eventually(reached, timeout=60, interval=0.3)


async def test_a_time_sliced_node_serves_one_tenant_at_a_time(
    platform: Platform, kube: k8s.ApiClient
) -> None:
    spec = await shared_spec(
        platform, gpuType=L40S_SHARED, gpuNum=1, gpuSharing="time-sliced", timeSlicingReplicas=4
    )
    first, second = await platform.tenant(max_gpus=4), await platform.tenant(max_gpus=4)
    # Two of the first tenant's instances share the node's replicas...
    ones = [await instance_on(platform, first, spec["name"], "running") for _ in range(2)]
    assert {one["node"] for one in ones} == {"l40s-shared-zone-a-0"}
    # ...and the second tenant's waits, though 14 replicas are free there: time-slicing
    # does not fence GPU memory.
    waiting = await instance_on(platform, second, spec["name"], "pending")

    async def refused() -> Any:
        try:
            pod = await k8s.CoreV1Api(kube).read_namespaced_pod(
                f"inst-{waiting['instanceID']}", tenant_namespace(second.tenant_id)
            )
        except k8s.ApiException:
            return None  # not made yet
        conditions = {c.type: c for c in pod.status.conditions or []}
        scheduled = conditions.get("PodScheduled")
        return pod if scheduled is not None and scheduled.reason == "Unschedulable" else None

    pod = await eventually(refused, timeout=30, interval=0.3)
    assert not pod.spec.node_name
    assert pod.metadata.labels["gpucloud.io/gpu-sharing"] == "time-sliced"

    for one in ones:
        stopped = await platform.http.delete(
            f"/v1/gpu-instances/{one['instanceID']}", headers=bearer(first.admin_key)
        )
        assert stopped.status_code in (200, 202), stopped.text

    async def placed() -> dict[str, Any] | None:
        found = await platform.http.get(
            f"/v1/gpu-instances/{waiting['instanceID']}", headers=bearer(second.admin_key)
        )
        body: dict[str, Any] = found.json()
        return body if body["state"] == "running" else None

    # Once the first tenant's pods are gone, the node is the second tenant's.
    running = await eventually(placed, timeout=90, interval=0.5)
    assert running["node"] == "l40s-shared-zone-a-0"


async def test_the_simulator_reports_each_mig_slice_for_the_instance_holding_it(
    platform: Platform, stack_env: dict[str, str]
) -> None:
    spec = await shared_spec(
        platform, gpuType=A100, gpuNum=2, gpuSharing="mig", migProfile="3g.20gb"
    )
    account = await platform.tenant(max_gpus=2)
    instance = await instance_on(platform, account, spec["name"], "running")
    assert instance["node"] == "a100-mig-zone-a-0"
    fleet = SimulatedFleet(seed=3)
    kube = KubeClient(stack_env["GPUCLOUD_KUBECONFIG"])
    await kube.connect()
    try:
        # As the node agent's simulator follows the cluster.
        await sync_fleet(fleet, kube, "gpucloud.io/node-pool=a100-mig")
    finally:
        await kube.close()

    samples = fleet.sample("a100-mig-zone-a-0", datetime.now(UTC))

    # One sample per MIG device the node advertises, none for the partitioned GPUs.
    assert len(samples) == 28 + 8
    assert {s.slice for s in samples} == {"1g.5gb", "3g.20gb"}
    mine = [s for s in samples if s.instance_id == instance["instanceID"]]
    assert [(s.slice, s.tenant_id) for s in mine] == [("3g.20gb", account.tenant_id)] * 2
    assert all(s.utilization_gpu_pct >= 70 for s in mine)
    # Each is part of a physical GPU: its memory is its profile's share of it.
    for sample in mine:
        assert sample.parent_gpu_uuid is not None
        assert sample.parent_gpu_uuid.startswith("GPU-sim-a100-mig-zone-a-0-")
        assert sample.memory_total_mib == round(model_memory_mib(A100) * 3 / 7)
    idle = [s for s in samples if s.instance_id is None]
    assert len(idle) == 34
    assert all(s.utilization_gpu_pct <= 3 for s in idle)
