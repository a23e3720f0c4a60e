"""A GPU is attributed to whatever workload holds it: an instance, a batch job's run or
an inference service's replica, each under its own workload id, with its tenant."""

from __future__ import annotations

import contextlib
import random
from datetime import UTC, datetime
from typing import Any

from kubernetes_asyncio import client as k8s

from gpucloud_agent.agent import sync_fleet
from gpucloud_agent.simulated import SimulatedFleet
from gpucloud_libs.kube import KubeClient
from gpucloud_libs.naming import job_workload_id, service_workload_id
from gpucloud_stack import fleet as stack_fleet

from .platform import Platform, bearer
from .support import eventually, unique


async def test_jobs_and_replicas_hold_their_gpus_in_telemetry_as_instances_do(
    platform: Platform, kube: k8s.ApiClient, stack_env: dict[str, str]
) -> None:
    product, pool = unique("ATTR-GPU"), unique("attr")
    node = unique("attr-node")
    manifest: Any = stack_fleet.gpu_node(
        node, product=product, gpus=4, zone="zone-a", cpu="64", memory="512Gi",
        labels={"gpucloud.io/test-pool": pool}, pod_cidr=f"127.{random.randint(100, 240)}.{random.randint(0, 250)}.0/24",
    )  # fmt: skip
    await k8s.CoreV1Api(kube).create_node(manifest)
    try:
        account = await platform.tenant(max_gpus=8, max_instances=4)
        spec = await platform.spec(gpu_type=product)
        owner = bearer(account.admin_key)
        job_id, service_id = unique("train"), unique("chat")
        job = {"jobID": job_id, "image": "busybox", "specName": spec,
               "env": [{"name": "GPUCLOUD_SIM_RUN_FOR", "value": "600s"}]}  # fmt: skip
        assert (await platform.post_as_tenant(account, "/v1/jobs", job)).status_code == 202
        service = {"serviceID": service_id, "image": "vllm", "specName": spec, "port": 8000,
                   "readinessPath": "/health", "minReplicas": 1}  # fmt: skip
        assert (
            await platform.post_as_tenant(account, "/v1/inference-services", service)
        ).is_success
        started = await platform.start_instance(account, {"image": "trainer", "specName": spec})
        assert started.status_code == 202, started.text
        instance_id = started.json()["instanceID"]

        simulated = SimulatedFleet(seed=5)
        client = KubeClient(stack_env["GPUCLOUD_KUBECONFIG"])
        await client.connect()
        wanted = {instance_id, job_workload_id(job_id), service_workload_id(service_id)}

        async def attributed() -> dict[str, str] | None:
            # As the node agent's simulator follows the cluster.
            await sync_fleet(simulated, client, f"gpucloud.io/test-pool={pool}")
            samples = simulated.sample(node, datetime.now(UTC))
            held = {s.instance_id: s.tenant_id or "" for s in samples if s.instance_id}
            return held if set(held) == wanted else None

        try:
            held = await eventually(attributed, timeout=60, interval=1)
        finally:
            await client.close()
        assert set(held.values()) == {account.tenant_id}
        await platform.http.delete(f"/v1/jobs/{job_id}", headers=owner)
        await platform.http.delete(f"/v1/inference-services/{service_id}", headers=owner)
        await platform.http.delete(f"/v1/gpu-instances/{instance_id}", headers=owner)
    finally:
        with contextlib.suppress(k8s.ApiException):
            await k8s.CoreV1Api(kube).delete_node(node)
