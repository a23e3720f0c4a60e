"""The pure parts of the instances service's capabilities and controller machinery."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gpucloud_instances import manifests
from gpucloud_instances.admission import allowed_zones, quota_refusal
from gpucloud_instances.controller.cache import ClusterCache
from gpucloud_instances.controller.workqueue import WorkQueue
from gpucloud_instances.documents import InstanceDoc, QuotaDoc, SpecDoc
from gpucloud_instances.instances import manifests as instance_manifests
from gpucloud_instances.lifecycle import State, Step
from gpucloud_instances.settings import InstancesSettings
from gpucloud_instances.stocks.documents import StockUnitDoc
from gpucloud_instances.stocks.targets import stock_status
from gpucloud_instances.tenancy.tenants import tenant_fields
from gpucloud_instances.transitions import transition_events
from gpucloud_instances.wakeups import (
    ADMISSION,
    STOCKS,
    WorkItem,
    instance_item,
    job_item,
    service_item,
    tenant_item,
)
from gpucloud_libs.errors import QuotaExceeded, ValidationFailed
from gpucloud_libs.events import TenantQuota, TenantUpserted
from gpucloud_libs.kube import KubeClient, _env_proxy

from .fixtures import a_pod, a_spec

AT = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
QUOTA = QuotaDoc(
    max_gpus=8, max_instances=2, max_storage_bytes=0, monthly_spend_cap_cents=None,
    max_cpu_cores=None, max_memory_gib=None,
)  # fmt: skip


def spec(zones: list[str]) -> SpecDoc:
    return a_spec(zones=zones)


def unit(spec_name: str, state: str, cluster: str = "local") -> StockUnitDoc:
    return StockUnitDoc(
        _id=f"stock-{spec_name}-{state}", cluster=cluster, spec_name=spec_name, state=state,
        node=None, zone=None, created_at=AT,
    )  # fmt: skip


def test_quota_admits_up_to_each_limit_and_names_the_one_exceeded() -> None:
    assert quota_refusal(QUOTA, count=1, gpus=4, wanted=4) is None
    instances = quota_refusal(QUOTA, count=2, gpus=0, wanted=1)
    assert isinstance(instances, QuotaExceeded)
    assert instances.extensions["limit"] == "max_instances"
    gpus = quota_refusal(QUOTA, count=0, gpus=5, wanted=4)
    assert isinstance(gpus, QuotaExceeded)
    assert gpus.extensions == {
        "limit": "max_gpus", "limit_value": 8, "in_use": 5, "requested": 4
    }  # fmt: skip


def test_zones_narrow_to_the_one_asked_for_within_the_spec() -> None:
    offered = spec(["zone-a", "zone-b"])
    assert allowed_zones(offered, None) == ["zone-a", "zone-b"]
    assert allowed_zones(offered, "zone-b") == ["zone-b"]
    assert allowed_zones(spec([]), "zone-c") == ["zone-c"]
    with pytest.raises(ValidationFailed, match="offered in"):
        allowed_zones(offered, "zone-c")


def test_stock_status_counts_each_stocks_units_by_state_per_cluster() -> None:
    units = [
        unit("a", "available"), unit("a", "placing"), unit("b", "available"),
        unit("a", "available", cluster="local-2"),
    ]  # fmt: skip
    targets = {("local", "b"): 1, ("local", "a"): 3, ("local-2", "a"): 2}
    [a, b, a2] = stock_status(targets, units)  # by cluster, then spec
    assert (a.cluster, a.spec_name, a.target, a.available, a.placing) == ("local", "a", 3, 1, 1)
    assert (b.cluster, b.spec_name, b.target, b.available, b.placing) == ("local", "b", 1, 1, 0)
    # The second cluster's units count for its own stock of the spec alone.
    assert (a2.cluster, a2.spec_name, a2.target, a2.available) == ("local-2", "a", 2, 1)


def test_tenant_namespace_quota_follows_gpus_unless_set_and_versions_change_with_it() -> None:
    settings = InstancesSettings(default_cpu_cores_per_gpu=4, default_memory_gib_per_gpu=32)
    quota = TenantQuota(max_gpus=2, max_instances=1, max_storage_bytes=0)
    derived = tenant_fields(
        TenantUpserted(tenant_id="acme", name="Acme", status="active", quota=quota), settings
    )
    assert (derived["namespace_cpu"], derived["namespace_memory"]) == ("8", "64Gi")
    pinned = tenant_fields(
        TenantUpserted(
            tenant_id="acme", name="Acme", status="active",
            quota=quota.model_copy(update={"max_cpu_cores": 3}),
        ),
        settings,
    )  # fmt: skip
    assert pinned["namespace_cpu"] == "3"
    assert pinned["version"] != derived["version"]


def test_transition_events_number_on_from_the_document_and_chain_previous_states() -> None:
    doc = InstanceDoc(
        _id="acme/i-1", tenant_id="acme", instance_id="i-1", user_id=None, idempotency_key=None,
        request_hash="", spec_name="h100-1", gpu_type="H100", gpu_count=1, cpu="8",
        memory="64Gi", zones=[], image="jupyter/base-notebook", template={}, storages=[],
        namespace="t-acme", state="scheduled", reason=None, message=None, sequence=2,
        history=[], has_outbox=False, admitted=True, node=None, zone=None, from_stock=False,
        created_at=AT, updated_at=AT,
    )  # fmt: skip
    events = transition_events(doc, [Step(State.READY, AT), Step(State.RUNNING, AT)])
    assert [event["id"] for event in events] == ["acme/i-1#3", "acme/i-1#4"]
    payloads = [json.loads(event["value"]) for event in events]
    assert [(p["previous_state"], p["state"]) for p in payloads] == [
        ("scheduled", "ready"),
        ("ready", "running"),
    ]
    assert {event["key"] for event in events} == {"acme/i-1"}  # one partition, in order


async def test_the_work_queue_merges_wakeups_and_reruns_an_item_woken_while_busy() -> None:
    queue = WorkQueue()
    a = instance_item("acme/i-1")
    queue.wake(instance_item("ignored"))  # not the leader yet
    queue.accepting = True
    seen: list[WorkItem] = []
    release = asyncio.Event()

    async def handle(item: WorkItem) -> None:
        seen.append(item)
        if len(seen) == 1:
            queue.wake(a)  # a change while it is being reconciled
            await release.wait()

    queue.wake(a)
    queue.wake(instance_item("acme/i-1"))  # the same item: merged with the one queued
    worker = asyncio.create_task(queue.work(0, handle))
    await asyncio.sleep(0.05)
    assert seen == [a]
    release.set()
    await asyncio.sleep(0.05)
    worker.cancel()
    assert seen == [a, a]


def test_work_items_are_stored_and_read_back_as_they_were_written() -> None:
    """Wake-ups for the leader go through the store as text: every kind comes back as
    itself, and an instance is written by its key alone, as before items had kinds."""
    items = [
        instance_item("acme/i-1"), job_item("acme/train"), service_item("acme/chat"),
        tenant_item("acme"), STOCKS, ADMISSION,
    ]  # fmt: skip
    assert [WorkItem.parse(str(item)) for item in items] == items
    assert [str(item) for item in items] == [
        "acme/i-1", "job:acme/train", "service:acme/chat", "tenant:acme", "stocks", "admission",
    ]  # fmt: skip
    assert len({*items, instance_item("acme/i-1")}) == len(items)


def test_the_kubernetes_proxy_comes_from_the_environment_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    assert _env_proxy("https://10.0.0.1:6443") is None
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    assert _env_proxy("https://10.0.0.1:6443") == "http://proxy.example:3128"
    monkeypatch.setenv("NO_PROXY", "10.0.0.1")
    assert _env_proxy("https://10.0.0.1:6443") is None


def node(ready: str, since: datetime) -> dict[str, Any]:
    stamp = since.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "metadata": {"name": "n1"},
        "status": {"conditions": [{"type": "Ready", "status": ready, "lastTransitionTime": stamp}]},
    }


def test_a_node_is_trusted_through_a_short_not_ready_blip_only() -> None:
    cache = ClusterCache(
        KubeClient(None), wake=lambda _item: None, wake_stocks=lambda: None, node_lost_grace_s=120
    )
    now = datetime.now(UTC)
    cache.nodes = {"n1": node("True", now)}
    assert cache.node_ok("n1")
    cache.nodes = {"n1": node("False", now - timedelta(seconds=30))}
    assert cache.node_ok("n1")
    cache.nodes = {"n1": node("False", now - timedelta(seconds=300))}
    assert not cache.node_ok("n1")
    assert not cache.node_ok("gone")
    assert cache.node_ok(None)  # not placed yet


def test_pods_the_scheduler_found_no_room_for_wake_the_stocks() -> None:
    """Warm units make way only for live workload pods reported Unschedulable, and
    the report wakes the stock pass."""
    woken: list[bool] = []
    cache = ClusterCache(
        KubeClient(None), wake=lambda _item: None, wake_stocks=lambda: woken.append(True),
        node_lost_grace_s=120,
    )  # fmt: skip

    def instance_pod(instance: str, node: str | None, reason: str) -> dict[str, Any]:
        return {
            "metadata": {"name": f"inst-{instance}", "labels": {
                "gpucloud.io/tenant": "t", "gpucloud.io/instance": instance}},
            "spec": {"nodeName": node} if node else {},
            "status": {"conditions": [
                {"type": "PodScheduled", "status": "False", "reason": reason}]},
        }  # fmt: skip

    cache._on_pod("ADDED", instance_pod("bound", "n1", "Unschedulable"))
    cache._on_pod("ADDED", instance_pod("gated", None, "SchedulingGated"))
    assert cache.waiting_for_a_node() == []
    assert woken == []
    cache._on_pod("MODIFIED", instance_pod("waits", None, "Unschedulable"))
    assert [p["metadata"]["name"] for p in cache.waiting_for_a_node()] == ["inst-waits"]
    assert woken == [True]


def test_a_pods_zones_are_read_back_from_its_placement() -> None:
    shape = a_pod(zones=["zone-a", "zone-b"])
    pod = instance_manifests.instance_pod(shape, "i", ("stock-s-1", "n1"))
    assert manifests.placement_zones(pod) == ["zone-a", "zone-b"]
    assert pod["spec"]["nodeName"] == "n1"
    assert pod["metadata"]["annotations"] == {manifests.STOCK_UNIT: "stock-s-1"}
    anywhere = instance_manifests.instance_pod(dataclasses.replace(shape, zones=[]), "i")
    assert manifests.placement_zones(anywhere) == []
    assert "nodeName" not in anywhere["spec"]
    assert "annotations" not in anywhere["metadata"]
