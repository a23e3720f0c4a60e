"""Multi-node jobs on the real stack: the stack's JobSet controller (sigs.k8s.io/jobset)
runs them on kwok nodes, and the admission queue admits one only when every one of its
pods has a node of its own with room: whole, or not at all."""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client as k8s

from gpucloud_libs.naming import tenant_namespace

from .platform import Platform, TenantAccount, assert_problem, bearer
from .support import eventually, loopback_gpu_nodes, unique
from .test_jobs import job_body, settled, submit, waits_for


async def spec_of(platform: Platform, product: str, gpus: int) -> str:
    name = unique("spec")
    body = {"name": name, "cpu": "4", "memory": "16Gi", "gpuType": product, "gpuNum": gpus}
    response = await platform.http.post("/v1/specs", json=body, headers=platform.admin)
    assert response.status_code == 201, response.text
    return name


async def running_instance(platform: Platform, account: TenantAccount, spec: str) -> str:
    response = await platform.start_instance(account, {"image": "pause", "specName": spec})
    assert response.status_code in (200, 201, 202), response.text
    instance_id: str = response.json()["instanceID"]

    async def running() -> bool:
        found = await platform.http.get(
            f"/v1/gpu-instances/{instance_id}", headers=bearer(account.admin_key)
        )
        return bool(found.json()["state"] == "running")

    await eventually(running, timeout=60, interval=0.3)
    return instance_id


async def job_pods(kube: k8s.ApiClient, account: TenantAccount, job_id: str) -> list[Any]:
    pods = await k8s.CoreV1Api(kube).list_namespaced_pod(
        tenant_namespace(account.tenant_id), label_selector=f"gpucloud.io/job={job_id}"
    )
    return list(pods.items)


async def test_a_multi_node_job_is_admitted_only_whole(
    platform: Platform, kube: k8s.ApiClient
) -> None:
    async with loopback_gpu_nodes(kube, 3, gpus=6) as (product, nodes):
        # Three nodes of 6 GPUs, each holding a 4-GPU instance: 6 GPUs free in all,
        # but no node with 3 of them.
        filler = await platform.tenant(max_gpus=12, max_instances=3)
        four = await spec_of(platform, product, 4)
        fillers = [await running_instance(platform, filler, four) for _ in nodes]
        account = await platform.tenant(max_gpus=6)
        three = await spec_of(platform, product, 3)
        job_id = await submit(platform, account, job_body(three, run_for="2s", nodes=2))

        waiting = await waits_for(platform, account, job_id, "capacity")
        assert waiting["state"] == "queued"
        assert waiting["nodes"] == 2
        assert await job_pods(kube, account, job_id) == []

        async def stop(instance_id: str) -> None:
            stopped = await platform.http.delete(
                f"/v1/gpu-instances/{instance_id}", headers=bearer(filler.admin_key)
            )
            assert stopped.status_code in (200, 202), stopped.text

        # One node with room is not enough: each pod needs a node of its own.
        await stop(fillers[0])
        await waits_for(platform, account, job_id, "capacity")
        assert await job_pods(kube, account, job_id) == []

        await stop(fillers[1])
        done = await settled(platform, account, job_id, timeout=90)

        assert done["state"] == "succeeded", done
        runs = done["runs"]
        assert len(runs) == 2
        assert all(run["state"] == "succeeded" for run in runs)
        assert len({run["node"] for run in runs}) == 2  # a node each
        job_set = await k8s.CustomObjectsApi(kube).get_namespaced_custom_object(
            "jobset.x-k8s.io", "v1alpha2", tenant_namespace(account.tenant_id), "jobsets",
            f"job-{job_id}",
        )  # fmt: skip
        assert job_set["metadata"]["labels"]["gpucloud.io/job"] == job_id
        assert any(c["type"] == "Completed" for c in job_set["status"]["conditions"])
        await stop(fillers[2])


async def test_a_multi_node_job_gives_nodes_not_parallelism(platform: Platform) -> None:
    account = await platform.tenant(max_gpus=8)
    spec = await platform.spec(gpus=1)
    response = await platform.post_as_tenant(
        account, "/v1/jobs", job_body(spec, nodes=2, parallelism=2)
    )
    assert_problem(response, 422, "validation_failed")


async def test_a_multi_node_job_wider_than_the_fleet_fails_unschedulable(
    platform: Platform, kube: k8s.ApiClient
) -> None:
    async with loopback_gpu_nodes(kube, 2, gpus=2) as (product, _):
        account = await platform.tenant(max_gpus=6)
        spec = await spec_of(platform, product, 2)
        job_id = await submit(platform, account, job_body(spec, nodes=3))

        done = await settled(platform, account, job_id)

        assert done["state"] == "failed", done
        assert done["reason"] == "unschedulable"
        assert "needs 3 nodes" in done["message"]
        assert "the fleet has 2" in done["message"]
        assert done["runs"] == []
