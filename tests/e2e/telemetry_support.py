"""GPU telemetry the tests publish as a node's agent would: a history of a tenant's
workloads' GPUs, stored and alerted on by the monitoring service."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes_asyncio import client as k8s

from gpucloud_libs.events import GpuSample, TelemetryBatch
from gpucloud_libs.kafka import create_broker, publish_event
from gpucloud_libs.kafka_connection import KafkaConnection
from gpucloud_libs.topics import TELEMETRY
from gpucloud_stack.fleet import cpu_node

from .conftest import stack_service_env
from .platform import Platform, TenantAccount, bearer
from .support import as_its_node, eventually, unique


async def gpu_history(
    platform: Platform,
    a: TenantAccount,
    kafka: KafkaConnection,
    kube: k8s.ApiClient,
    instance_id: str,
    *other_workloads: str,
) -> tuple[str, str, str, str]:
    """Telemetry of a GPU that ran A's instance over the last minutes (back-dated, so
    its first minute is closed and stored), and an alert of A's own rule about it; and
    of one more GPU per other workload id (A's job, A's service)."""
    rule = await platform.http.post(
        "/v1/alert-rules",
        json={"name": "warm", "metric": "temperature_c", "threshold": 10, "durationS": 0},
        headers=bearer(a.admin_key),
    )
    assert rule.status_code == 201, rule.text
    node, gpu = unique("iso-node"), unique("GPU-iso")
    # Monitoring takes telemetry only from nodes the cluster has; cordoned, so that
    # nothing is placed on it.
    cordoned: Any = cpu_node(node) | {"spec": {"unschedulable": True}}
    await k8s.CoreV1Api(kube).create_node(cordoned)
    now = datetime.now(UTC)
    agent = stack_service_env("agent")
    broker = create_broker(kafka, client_id=unique("test-agent"))
    await broker.start()
    try:
        for seconds_ago in (150, 90, 30):
            samples = tuple(
                GpuSample(
                    gpu_uuid=gpu if index == 0 else f"{gpu}-{index}",
                    index=index,
                    at=now - timedelta(seconds=seconds_ago),
                    utilization_gpu_pct=80,
                    utilization_memory_pct=40,
                    memory_used_mib=1000,
                    memory_total_mib=81_559,
                    temperature_c=60,
                    power_w=500,
                    tenant_id=a.tenant_id,
                    instance_id=workload,
                )
                for index, workload in enumerate((instance_id, *other_workloads))
            )
            batch = TelemetryBatch(node=node, source="simulated", samples=samples)
            await publish_event(broker, TELEMETRY, as_its_node(batch, agent), source="/tests")
    finally:
        await broker.stop()

    async def alert() -> str | None:
        of_rule = {"ruleID": rule.json()["ruleID"]}
        found = (
            await platform.http.get("/v1/alerts", params=of_rule, headers=bearer(a.admin_key))
        ).json()
        return next((x["alertID"] for x in found if x["ruleID"] == rule.json()["ruleID"]), None)

    async def stored() -> bool:
        series = await platform.http.get(f"/v1/gpus/{gpu}/metrics", headers=bearer(a.admin_key))
        return series.status_code == 200 and bool(series.json()["points"])

    a_alert = await eventually(alert, timeout=30)
    await eventually(stored, timeout=30)
    return gpu, node, rule.json()["ruleID"], a_alert
