"""A GPU is attributed to whatever workload holds it: an instance, a batch job's run or
an inference service's replica, each under its own workload id, with its tenant."""

from __future__ import annotations

import contextlib
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client as k8s

from gpucloud_agent.simulated import SimulatedFleet
from gpucloud_agent.simulated_telemetry import sync_fleet
from gpucloud_libs.events import GpuSample, TelemetryBatch
from gpucloud_libs.kafka import create_broker, publish_event
from gpucloud_libs.kafka_connection import KafkaConnection
from gpucloud_libs.kube import KubeClient
from gpucloud_libs.naming import job_workload_id, service_workload_id
from gpucloud_libs.topics import TELEMETRY
from gpucloud_stack import fleet as stack_fleet

from .cli_support import cli_for
from .conftest import stack_service_env
from .platform import Platform, assert_problem, bearer
from .support import as_its_node, eventually, unique


async def test_jobs_and_replicas_hold_their_gpus_in_telemetry_as_instances_do(
    platform: Platform,
    kube: k8s.ApiClient,
    stack_env: dict[str, str],
    kafka: KafkaConnection,
    tmp_path: Path,
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

        # What the agent would publish, back-dated so a whole minute is rolled up:
        # each workload's GPUs then read back under its own name, to its tenant only.
        now = datetime.now(UTC)
        await _publish(
            kafka, node, [simulated.sample(node, now - timedelta(seconds=s)) for s in (150, 90)]
        )
        since = (now - timedelta(hours=1)).isoformat().replace("+00:00", "Z")
        reads = [
            f"/v1/gpu-instances/{instance_id}/metrics",
            f"/v1/jobs/{job_id}/metrics",
            f"/v1/inference-services/{service_id}/metrics",
        ]
        outsider = await platform.tenant()

        async def charted() -> bool:
            for path in reads:
                series = await platform.http.get(f"{path}?start={since}", headers=owner)
                if series.status_code != 200 or not series.json()["points"]:
                    return False
            return True

        await eventually(charted, timeout=30)
        for path in reads:
            other = await platform.http.get(path, headers=bearer(outsider.admin_key))
            assert_problem(other, 404)
        # The same, as the tenant reads it at a terminal.
        cli = cli_for(tmp_path, platform)
        assert (await cli.login(account.admin_key)).code == 0
        for group, workload in (("instances", instance_id), ("jobs", job_id),
                                ("services", service_id)):  # fmt: skip
            table = (await cli.ok(group, "metrics", workload)).out
            assert "GPU %" in table, table
            series = (await cli.ok("-o", "json", group, "metrics", workload)).json()
            assert series["subject"] == workload
            assert series["points"][0]["gpus"] >= 1, series
        by_operator = await platform.http.get(
            f"/v1/jobs/{job_id}/metrics?start={since}&tenantID={account.tenant_id}",
            headers=platform.admin,
        )
        assert by_operator.status_code == 200, by_operator.text
        assert by_operator.json()["points"], by_operator.text
        await platform.http.delete(f"/v1/jobs/{job_id}", headers=owner)
        await platform.http.delete(f"/v1/inference-services/{service_id}", headers=owner)
        await platform.http.delete(f"/v1/gpu-instances/{instance_id}", headers=owner)
    finally:
        with contextlib.suppress(k8s.ApiException):
            await k8s.CoreV1Api(kube).delete_node(node)


async def _publish(kafka: KafkaConnection, node: str, batches: list[list[GpuSample]]) -> None:
    agent = stack_service_env("agent")
    broker = create_broker(kafka, client_id=unique("test-agent"))
    await broker.start()
    try:
        for samples in batches:
            batch = TelemetryBatch(node=node, source="simulated", samples=tuple(samples))
            await publish_event(broker, TELEMETRY, as_its_node(batch, agent), source="/tests")
    finally:
        await broker.stop()
