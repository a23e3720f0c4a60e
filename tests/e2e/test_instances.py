"""GPU instances end to end: the instances service over the real API server and kwok."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import watch
from pymongo import AsyncMongoClient

from gpucloud_instances.stocks.reconciler import REFILL_QUIET_S
from gpucloud_libs.events import NodeHealthChanged, TenantQuota, TenantUpserted
from gpucloud_libs.identity import IdentitySigner, Role, SignedAs
from gpucloud_libs.kafka import create_broker, publish_event
from gpucloud_libs.kafka_connection import KafkaConnection
from gpucloud_libs.naming import parse_instance_host
from gpucloud_libs.topics import INSTANCE_LIFECYCLE, NODE_HEALTH, TENANTS
from gpucloud_stack import fleet, layout

from .support import eventually, read_topic, unique

H100 = "NVIDIA-H100-80GB-HBM3"
STACK = layout.LOCAL_DIR / "stack.py"


@dataclass
class Instances:
    """A client of the instances service that signs identities like the gateway does."""

    http: httpx.AsyncClient
    signer: IdentitySigner
    kafka: KafkaConnection
    started: list[tuple[str, str]] = field(default_factory=list)

    def as_(self, role: Role, tenant_id: str | None) -> SignedAs:
        return SignedAs(self.signer, audience="instances", role=role, tenant_id=tenant_id)

    @property
    def admin(self) -> SignedAs:
        return self.as_("platform-admin", None)

    async def spec(
        self, gpus: int = 8, gpu_type: str = H100, zones: list[str] | None = None
    ) -> str:
        name = unique("spec")
        body = {
            "name": name,
            "cpu": "8",
            "memory": "64Gi",
            "gpuType": gpu_type,
            "gpuNum": gpus,
            "zones": zones or [],
        }
        response = await self.http.post("/specs", json=body, auth=self.admin)
        assert response.status_code == 201, response.text
        return name

    async def tenant(self, *, max_gpus: int = 64, max_instances: int = 16) -> str:
        """Provision a tenant the way the gateway does: a tenant.upserted event."""
        tenant_id = unique("t")
        broker = create_broker(self.kafka, client_id=unique("test-gateway"))
        await broker.start()
        try:
            quota = TenantQuota(
                max_gpus=max_gpus, max_instances=max_instances, max_storage_bytes=10**12
            )
            await publish_event(
                broker,
                TENANTS,
                TenantUpserted(tenant_id=tenant_id, name=tenant_id, status="active", quota=quota),
                source="/tests",
            )
        finally:
            await broker.stop()
        return tenant_id

    async def start(
        self, tenant_id: str, spec: str, *, expect: int = 202, **extra: Any
    ) -> dict[str, Any]:
        body = {"image": "jupyter/base-notebook:latest", "specName": spec, **extra}

        async def attempt() -> httpx.Response | None:
            response = await self.http.post(
                "/gpu-instances", json=body, auth=self.as_("tenant-user", tenant_id)
            )
            # 409 tenant_not_ready: the tenant event is still on its way
            return (
                None
                if response.status_code == 409 and response.json()["code"] == "tenant_not_ready"
                else response
            )

        response = await eventually(attempt, timeout=30)
        assert response.status_code == expect, response.text
        result: dict[str, Any] = response.json()
        if response.status_code == 202:
            self.started.append((tenant_id, result["instanceID"]))
        return result

    async def stop_started(self) -> None:
        """Give the fleet's GPUs back: the data directory outlives test runs."""
        for tenant_id, instance_id in self.started:
            await self.http.delete(
                f"/gpu-instances/{instance_id}", auth=self.as_("tenant-user", tenant_id)
            )
        self.started.clear()

    async def get(self, tenant_id: str, instance_id: str) -> dict[str, Any]:
        response = await self.http.get(
            f"/gpu-instances/{instance_id}", auth=self.as_("tenant-user", tenant_id)
        )
        assert response.status_code == 200, response.text
        result: dict[str, Any] = response.json()
        return result

    async def wait_state(
        self, tenant_id: str, instance_id: str, *states: str, timeout: float = 60
    ) -> dict[str, Any]:
        last: dict[str, Any] = {}

        async def reached() -> dict[str, Any] | None:
            instance = last["seen"] = await self.get(tenant_id, instance_id)
            return instance if instance["state"] in states else None

        try:
            return await eventually(reached, timeout=timeout)
        except AssertionError as late:
            seen = last.get("seen", {})
            steps = [(step["state"], step.get("reason")) for step in seen.get("history", [])]
            raise AssertionError(
                f"{instance_id} not {'/'.join(states)} within {timeout}s: it is "
                f"{seen.get('state')} ({seen.get('reason')}), history {steps}"
            ) from late


@pytest.fixture(scope="module")
async def api(
    stack_env: dict[str, str], kafka: KafkaConnection, gateway_signer: IdentitySigner
) -> AsyncIterator[Instances]:
    async with httpx.AsyncClient(base_url=stack_env["GPUCLOUD_INSTANCES_URL"], timeout=30) as http:
        yield Instances(http, gateway_signer, kafka)


@pytest.fixture(autouse=True)
async def stop_what_the_test_started(api: Instances) -> AsyncIterator[None]:
    yield
    await api.stop_started()


async def lifecycle_events(
    kafka: KafkaConnection, tenant_id: str, instance_id: str
) -> list[dict[str, Any]]:
    records = await read_topic(kafka, INSTANCE_LIFECYCLE.name, expect=10**9, timeout=3)
    events = []
    for record in records:
        if record.key == f"{tenant_id}/{instance_id}".encode():
            headers = {key: value.decode() for key, value in record.headers}
            events.append({"id": headers["ce_id"], **json.loads(record.value)})
    return events


async def test_instance_starts_runs_and_stops(
    api: Instances, kube: k8s.ApiClient, stack_env: dict[str, str]
) -> None:
    spec = await api.spec(gpus=8)
    tenant = await api.tenant()
    template = {
        "ports": [{"port": 8888, "isPublic": True, "isProbe": True, "baseUrl": "/lab"}],
        "envs": [{"name": "MODE", "value": "lab"}],
    }
    created = await api.start(tenant, spec, template=template)
    assert created["state"] == "pending"
    assert created["urls"]
    assert created["urls"][0].endswith("/lab")
    instance_id = created["instanceID"]

    running = await api.wait_state(tenant, instance_id, "running")
    assert [step["state"] for step in running["history"]] == [
        "pending",
        "scheduled",
        "ready",
        "running",
    ]
    stamps = [step["at"] for step in running["history"]]
    assert stamps == sorted(stamps)
    assert running["node"].startswith("h100-")
    assert running["zone"] in {"zone-a", "zone-b"}

    core = k8s.CoreV1Api(kube)
    namespace = (await core.list_namespace(label_selector=f"gpucloud.io/tenant={tenant}")).items[0]
    assert namespace.metadata.labels["pod-security.kubernetes.io/enforce"] == "restricted"
    ns = namespace.metadata.name
    pod = await core.read_namespaced_pod(f"inst-{instance_id}", ns)
    assert pod.spec.containers[0].resources.limits["nvidia.com/gpu"] == "8"
    assert pod.spec.node_selector == {"nvidia.com/gpu.product": H100}
    assert pod.spec.containers[0].readiness_probe.http_get.path == "/lab"
    assert pod.metadata.labels["gpucloud.io/tenant"] == tenant
    quota = await core.read_namespaced_resource_quota("gpucloud-quota", ns)
    assert quota.spec.hard["requests.nvidia.com/gpu"] == "64"
    assert (await core.list_namespaced_limit_range(ns)).items
    policies = await k8s.NetworkingV1Api(kube).list_namespaced_network_policy(ns)
    assert [p.metadata.name for p in policies.items] == ["gpucloud-tenant-isolation"]
    # Instance URLs are served by the gateway, never exposed by an Ingress of their own.
    assert not (await k8s.NetworkingV1Api(kube).list_namespaced_ingress(ns)).items
    host = urlsplit(created["urls"][0]).hostname or ""
    domain = stack_env["GPUCLOUD_INSTANCE_DOMAIN"]
    assert parse_instance_host(host, tenant, domain) == (instance_id, 8888)
    policy = policies.items[0].spec.ingress[0]._from
    assert [peer.namespace_selector.match_labels for peer in policy if peer.namespace_selector] == [
        {"kubernetes.io/metadata.name": "gpucloud-system"}
    ]
    await core.read_namespaced_service(f"inst-{instance_id}", ns)

    response = await api.http.delete(
        f"/gpu-instances/{instance_id}", auth=api.as_("tenant-user", tenant)
    )
    assert response.status_code == 202
    stopped = await api.wait_state(tenant, instance_id, "stopped")
    assert [step["state"] for step in stopped["history"]][-2:] == ["stopping", "stopped"]
    pods = await core.list_namespaced_pod(ns, label_selector=f"gpucloud.io/instance={instance_id}")
    assert pods.items == []
    with pytest.raises(k8s.ApiException):
        await core.read_namespaced_service(f"inst-{instance_id}", ns)

    # Each transition was published, in order, under a deterministic id (again under
    # the same id only if the controller lost its lead meanwhile).
    events = await eventually(
        lambda: _at_least(lifecycle_events(api.kafka, tenant, instance_id), 6), timeout=20
    )
    assert [e["state"] for e in events] == [
        "pending",
        "scheduled",
        "ready",
        "running",
        "stopping",
        "stopped",
    ]
    assert [e["sequence"] for e in events] == [1, 2, 3, 4, 5, 6]
    assert len({e["id"] for e in events}) == 6
    assert all(e["gpu_count"] == 8 and e["gpu_type"] == H100 for e in events)
    assert events[1]["node"] == running["node"]


async def test_more_gpus_than_any_node_fails_unschedulable(api: Instances) -> None:
    spec = await api.spec(gpus=16)
    tenant = await api.tenant(max_gpus=32)
    created = await api.start(tenant, spec)
    failed = await api.wait_state(tenant, created["instanceID"], "failed")
    assert failed["reason"] == "unschedulable"
    assert "16" in failed["message"]


async def test_quota_is_checked_before_creating(api: Instances) -> None:
    spec = await api.spec(gpus=8)
    tenant = await api.tenant(max_gpus=8, max_instances=4)
    await api.start(tenant, spec)
    response = await api.start(tenant, spec, expect=422)
    assert response["code"] == "quota_exceeded"
    assert response["limit"] == "max_gpus"
    assert (response["in_use"], response["requested"], response["limit_value"]) == (8, 8, 8)


async def test_instance_limit_is_enforced(api: Instances) -> None:
    spec = await api.spec(gpus=1, gpu_type="NVIDIA-L40S")
    tenant = await api.tenant(max_gpus=8, max_instances=1)
    await api.start(tenant, spec)
    response = await api.start(tenant, spec, expect=422)
    assert response["limit"] == "max_instances"


async def test_another_tenant_gets_404_and_sees_nothing(api: Instances) -> None:
    spec = await api.spec(gpus=1, gpu_type="NVIDIA-L40S")
    owner, intruder = await api.tenant(), await api.tenant()
    instance_id = (await api.start(owner, spec))["instanceID"]
    for role in ("tenant-user", "tenant-admin"):
        auth = api.as_(role, intruder)
        for method in ("GET", "DELETE"):
            response = await api.http.request(method, f"/gpu-instances/{instance_id}", auth=auth)
            assert response.status_code == 404, (role, method)
            assert response.json()["code"] == "not_found"
        listing = await api.http.get("/gpu-instances", auth=auth)
        assert listing.json()["items"] == []
    # the owner still has it, untouched
    assert (await api.get(owner, instance_id))["state"] != "stopping"


async def test_create_is_idempotent(api: Instances) -> None:
    spec = await api.spec(gpus=1, gpu_type="NVIDIA-L40S")
    tenant = await api.tenant()
    instance_id = unique("nb")
    first = await api.start(tenant, spec, instanceID=instance_id)
    again = await api.start(tenant, spec, instanceID=instance_id, expect=200)
    assert again["instanceID"] == first["instanceID"] == instance_id
    conflict = await api.start(tenant, spec, instanceID=instance_id, image="other:1", expect=409)
    assert conflict["code"] == "conflict"

    key = {"Idempotency-Key": unique("key")}
    auth = api.as_("tenant-user", tenant)
    body = {"image": "pytorch:2", "specName": spec}
    one = await api.http.post("/gpu-instances", json=body, headers=key, auth=auth)
    two = await api.http.post("/gpu-instances", json=body, headers=key, auth=auth)
    assert (one.status_code, two.status_code) == (202, 200)
    api.started.append((tenant, one.json()["instanceID"]))
    assert one.json()["instanceID"] == two.json()["instanceID"]


async def test_bad_requests_get_clear_4xx(api: Instances) -> None:
    spec = await api.spec(gpus=1, gpu_type="NVIDIA-L40S")
    tenant = await api.tenant()
    await api.start(tenant, spec)  # the tenant is provisioned from here on
    user = api.as_("tenant-user", tenant)
    duplicate_ports = {"ports": [{"port": 80}, {"port": 80}]}
    cases = [
        ({"image": "x", "specName": spec, "template": duplicate_ports}, user, 422),
        ({"image": "x", "specName": "no-such-spec"}, user, 422),
        ({"image": "has space", "specName": spec}, user, 422),
        ({"image": "x", "specName": spec}, httpx.Auth(), 401),  # no identity
        ({"image": "x", "specName": spec}, api.admin, 403),
    ]
    for body, auth, status in cases:
        response = await api.http.post("/gpu-instances", json=body, auth=auth)
        assert response.status_code == status, (body, response.text)
        assert response.headers["content-type"] == "application/problem+json"
    forbidden = await api.http.post(
        "/specs",
        json={"name": "x", "cpu": "1", "memory": "1Gi", "gpuType": H100, "gpuNum": 1},
        auth=user,
    )
    assert forbidden.status_code == 403


async def test_cursor_pagination_walks_every_instance(api: Instances) -> None:
    spec = await api.spec(gpus=1, gpu_type="NVIDIA-L40S")
    tenant = await api.tenant(max_instances=5)
    ids = {(await api.start(tenant, spec))["instanceID"] for _ in range(5)}
    seen: list[str] = []
    cursor = None
    while True:
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = (
            await api.http.get("/gpu-instances", params=params, auth=api.as_("tenant-user", tenant))
        ).json()
        seen.extend(item["instanceID"] for item in page["items"])
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert sorted(seen) == sorted(ids)


async def test_platform_admin_list_walks_every_tenant_once(api: Instances) -> None:
    """The admin's list is walked tenant by tenant (FerretDB decodes a query's every
    match); its cursor still returns each instance once, across tenants."""
    spec = await api.spec(gpus=1, gpu_type="NVIDIA-L40S")
    tenants = [await api.tenant(max_instances=2) for _ in range(2)]
    started = {
        (tenant, (await api.start(tenant, spec))["instanceID"]) for tenant in tenants for _ in "ab"
    }
    seen: list[tuple[str, str]] = []
    cursor = None
    while True:
        params: dict[str, str | int] = {"limit": 1, "specName": spec}
        if cursor:
            params["cursor"] = cursor
        page = (await api.http.get("/gpu-instances", params=params, auth=api.admin)).json()
        seen.extend((item["tenantID"], item["instanceID"]) for item in page["items"])
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert sorted(seen) == sorted(started)
    one_tenant = await api.http.get(
        "/gpu-instances", params={"specName": spec, "tenantID": tenants[0]}, auth=api.admin
    )
    assert {item["tenantID"] for item in one_tenant.json()["items"]} == {tenants[0]}


async def test_published_events_leave_the_outbox_once_the_start_settles(
    api: Instances, mongo: AsyncMongoClient[dict[str, Any]]
) -> None:
    spec = await api.spec(gpus=1)
    tenant = await api.tenant()
    created = await api.start(tenant, spec)
    await api.wait_state(tenant, created["instanceID"], "running")
    stored = mongo["gpucloud_instances"]["instances"]

    async def cleared() -> dict[str, Any] | None:
        doc = await stored.find_one({"_id": f"{tenant}/{created['instanceID']}"})
        return doc if doc is not None and not doc["outbox"] and not doc["has_outbox"] else None

    # Each transition replaced the published events before it; the last ones go a
    # moment after, so a new leader has nothing to publish again.
    await eventually(cleared, timeout=10)
    events = await lifecycle_events(api.kafka, tenant, created["instanceID"])
    assert [e["state"] for e in events] == ["pending", "scheduled", "ready", "running"]


async def test_stock_fast_path_claims_a_warm_unit_and_refills(api: Instances) -> None:
    spec = await api.spec(gpus=4, gpu_type="NVIDIA-A100-SXM4-40GB")
    change = {"number": 1, "operationID": unique("op"), "specName": spec}
    for _ in range(2):  # a replayed operationID changes nothing
        response = await api.http.post("/stocks", json=change, auth=api.admin)
        assert response.status_code == 200, response.text
        assert response.json()["target"] == 1

    async def stock(available: int) -> dict[str, Any] | None:
        rows = (await api.http.get("/stocks", auth=api.admin)).json()
        [row] = [r for r in rows if r["specName"] == spec]
        return row if row["available"] == available else None

    removal = {"number": 1, "operationID": unique("op"), "specName": spec}
    try:
        await eventually(lambda: stock(1), timeout=30)
        tenant = await api.tenant()
        created = await api.start(tenant, spec)
        running = await api.wait_state(tenant, created["instanceID"], "running")
        assert running["fromStock"] is True
        await eventually(lambda: stock(1), timeout=30)  # a new placeholder took the unit's place
    finally:
        response = await api.http.request("DELETE", "/stocks", json=removal, auth=api.admin)
        assert response.json()["target"] == 0
    await eventually(lambda: stock(0), timeout=30)


async def test_a_stock_refills_once_the_starts_pause(api: Instances) -> None:
    spec = await api.spec(gpus=1, gpu_type="NVIDIA-A100-SXM4-40GB")
    change = {"number": 2, "operationID": unique("op"), "specName": spec}
    assert (await api.http.post("/stocks", json=change, auth=api.admin)).status_code == 200

    async def row() -> dict[str, Any]:
        rows = (await api.http.get("/stocks", auth=api.admin)).json()
        found: dict[str, Any] = next(r for r in rows if r["specName"] == spec)
        return found

    async def units(available: int) -> dict[str, Any] | None:
        found = await row()
        return found if (found["available"], found["placing"]) == (available, 0) else None

    removal = {"number": 2, "operationID": unique("op"), "specName": spec}
    try:
        await eventually(lambda: units(2), timeout=30)
        tenant = await api.tenant()
        created = await api.start(tenant, spec)  # claims a unit before it answers
        claimed_by = time.monotonic()
        # No new placeholder while starts may still come (a refill would slow them)...
        while time.monotonic() - claimed_by < REFILL_QUIET_S - 0.3:
            assert (await row())["placing"] == 0
            await asyncio.sleep(0.1)
        running = await api.wait_state(tenant, created["instanceID"], "running")
        assert running["fromStock"] is True
        # ... then the claimed unit is replaced.
        await eventually(lambda: units(2), timeout=30)
    finally:
        await api.http.request("DELETE", "/stocks", json=removal, auth=api.admin)
    await eventually(lambda: units(0), timeout=30)


async def test_stock_placeholders_pull_the_stocks_images_before_they_are_offered(
    api: Instances, kube: k8s.ApiClient
) -> None:
    spec = await api.spec(gpus=1, gpu_type="NVIDIA-L40S")
    image = "nvcr.io/nvidia/pytorch:24.10-py3"
    change = {"number": 1, "operationID": unique("op"), "specName": spec, "images": [image]}
    removal = {"number": 1, "operationID": unique("op"), "specName": spec}
    # A placeholder lives only until its unit is armed: watch for it from the start.
    async with stock_pods_seen(kube, spec) as seen:
        response = await api.http.post("/stocks", json=change, auth=api.admin)
        assert response.status_code == 200, response.text
        assert response.json()["images"] == [image]
        refused = await api.http.request(
            "DELETE", "/stocks", json={**change, "operationID": unique("op")}, auth=api.admin
        )
        assert refused.status_code == 422, refused.text
        try:

            async def offered() -> bool:
                rows = (await api.http.get("/stocks", auth=api.admin)).json()
                return any(r["specName"] == spec and r["available"] == 1 for r in rows)

            await eventually(offered, timeout=30)
            [placeholder] = [
                pod
                for pod in seen.values()
                if "gpucloud.io/stock-hold" not in pod["metadata"]["labels"]
            ]
            steps = placeholder["spec"]["initContainers"]
            # The tool first, then the stock's image, which runs the tool's `true`.
            assert [step["image"] for step in steps][1:] == [image]
            assert steps[1]["command"][-1] == "true"
            assert steps[1]["command"][0] == steps[0]["command"][-1]

            tenant = await api.tenant()
            created = await api.start(tenant, spec, image=image)
            running = await api.wait_state(tenant, created["instanceID"], "running")
            assert running["fromStock"] is True
            assert running["node"] == placeholder["spec"]["nodeName"]  # where it pulled
        finally:
            await api.http.request("DELETE", "/stocks", json=removal, auth=api.admin)


async def test_a_warm_unit_holds_its_gpus_with_no_pod_on_its_node(
    api: Instances, kube: k8s.ApiClient, lone_gpu_node: tuple[str, str]
) -> None:
    """An available unit's GPUs are held by a gated hold pod nominated to the node,
    which the kubelet never sees: a start binds there with nothing to delete first,
    and no other pod gets those GPUs meanwhile."""
    node, product = lone_gpu_node
    core = k8s.CoreV1Api(kube)
    spec = await api.spec(gpus=1, gpu_type=product)
    change = {"number": 3, "operationID": unique("op"), "specName": spec}
    removal = {**change, "operationID": unique("op")}
    assert (await api.http.post("/stocks", json=change, auth=api.admin)).status_code == 200
    outsider = f"outsider-{unique('p')}"
    try:
        await eventually(lambda: stock_row(api, spec, available=3), timeout=30)
        holds = (
            await core.list_namespaced_pod(
                "gpucloud-stocks", label_selector=f"gpucloud.io/stock={spec}"
            )
        ).items
        assert len(holds) == 3
        for hold in holds:
            assert hold.metadata.labels["gpucloud.io/stock-hold"] == "true"
            assert not hold.spec.node_name
            assert hold.status.nominated_node_name == node
        bound = await core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}")
        assert bound.items == []  # the kubelet would see nothing holding the GPUs

        # A pod from outside the platform finds the node full.
        pod: Any = {
            "metadata": {"name": outsider, "namespace": "default"},
            "spec": {
                "containers": [{"name": "c", "image": "pause",
                                "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
                "nodeSelector": {"nvidia.com/gpu.product": product},
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
            },
        }  # fmt: skip
        await core.create_namespaced_pod("default", pod)

        async def unschedulable() -> bool:
            found = await core.read_namespaced_pod(outsider, "default")
            return any(
                c.type == "PodScheduled" and c.reason == "Unschedulable"
                for c in found.status.conditions or []
            )

        await eventually(unschedulable, timeout=30)

        tenant = await api.tenant()
        created = await api.start(tenant, spec)
        running = await api.wait_state(tenant, created["instanceID"], "running")
        assert (running["fromStock"], running["node"]) == (True, node)
        # Its unit's hold goes once the pod is there; the other two stay.
        await eventually(lambda: stock_row(api, spec, available=2), timeout=30)
        assert (await core.read_namespaced_pod(outsider, "default")).spec.node_name is None
    finally:
        await api.http.request("DELETE", "/stocks", json=removal, auth=api.admin)
        with contextlib.suppress(k8s.ApiException):
            await core.delete_namespaced_pod(outsider, "default", grace_period_seconds=0)


async def test_warm_units_make_way_for_a_start_that_finds_no_room(
    api: Instances, lone_gpu_node: tuple[str, str]
) -> None:
    """Stocks yield to demand: a cold start of another spec that fits only where
    units are held takes their place, as it would preempt placeholders."""
    node, product = lone_gpu_node
    stocked, other = (
        await api.spec(gpus=1, gpu_type=product),
        await api.spec(gpus=2, gpu_type=product),
    )
    change = {"number": 3, "operationID": unique("op"), "specName": stocked}
    removal = {**change, "operationID": unique("op")}
    assert (await api.http.post("/stocks", json=change, auth=api.admin)).status_code == 200
    try:
        await eventually(lambda: stock_row(api, stocked, available=3), timeout=30)
        tenant = await api.tenant()
        created = await api.start(tenant, other)
        running = await api.wait_state(tenant, created["instanceID"], "running", timeout=60)
        assert (running["fromStock"], running["node"]) == (False, node)
        # Two units made way; their replacements wait for room.
        row = await eventually(lambda: stock_row(api, stocked, available=1), timeout=30)
        assert row["target"] == 3
    finally:
        await api.http.request("DELETE", "/stocks", json=removal, auth=api.admin)


async def stock_row(api: Instances, spec: str, *, available: int) -> dict[str, Any] | None:
    """The spec's row of `GET /stocks` once it shows `available` units."""
    rows = (await api.http.get("/stocks", auth=api.admin)).json()
    row: dict[str, Any] = next(r for r in rows if r["specName"] == spec)
    return row if row["available"] == available else None


@contextlib.asynccontextmanager
async def stock_pods_seen(kube: k8s.ApiClient, spec: str) -> AsyncIterator[dict[str, Any]]:
    """Every pod of the spec's stock (placeholders and holds) as last seen, by name."""
    seen: dict[str, Any] = {}

    async def follow() -> None:
        stream = watch.Watch()
        async for event in stream.stream(
            k8s.CoreV1Api(kube).list_namespaced_pod, "gpucloud-stocks",
            label_selector=f"gpucloud.io/stock={spec}", timeout_seconds=120,
        ):  # fmt: skip
            pod = event["raw_object"]
            seen[pod["metadata"]["name"]] = pod

    task = asyncio.create_task(follow())
    await asyncio.sleep(0.5)  # the watch is established
    try:
        yield seen
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def api_client_dict(kube: k8s.ApiClient, model: Any) -> dict[str, Any]:
    serialized: dict[str, Any] = kube.sanitize_for_serialization(model)
    return serialized


@pytest.fixture
async def lone_gpu_node(kube: k8s.ApiClient) -> AsyncIterator[tuple[str, str]]:
    """A kwok node with 3 GPUs of a product no other node has: (node name, product).

    Its capacity belongs to the test alone, whatever the rest of the suite left running.
    """
    core = k8s.CoreV1Api(kube)
    name, product = unique("lone"), unique("TEST-GPU")
    node: Any = fleet.gpu_node(
        name, product=product, gpus=3, zone="zone-a", cpu="32", memory="256Gi"
    )
    await core.create_node(node)
    yield name, product
    with contextlib.suppress(k8s.ApiException):
        await core.delete_node(name)


async def test_node_lost_under_a_running_instance_fails_it(
    api: Instances, kube: k8s.ApiClient, lone_gpu_node: tuple[str, str]
) -> None:
    node, product = lone_gpu_node
    spec = await api.spec(gpus=1, gpu_type=product)
    tenant = await api.tenant()
    created = await api.start(tenant, spec)
    running = await api.wait_state(tenant, created["instanceID"], "running")
    assert running["node"] == node

    await k8s.CoreV1Api(kube).delete_node(node)
    failed = await api.wait_state(tenant, created["instanceID"], "failed")
    assert failed["reason"] == "node_lost"
    assert [step["state"] for step in failed["history"]][-1] == "failed"


async def test_quarantined_node_gets_no_new_instances(
    api: Instances, kube: k8s.ApiClient, lone_gpu_node: tuple[str, str]
) -> None:
    node, product = lone_gpu_node
    core = k8s.CoreV1Api(kube)

    async def publish_health(health: str) -> None:
        broker = create_broker(api.kafka, client_id=unique("test-monitoring"))
        await broker.start()
        try:
            await publish_event(
                broker,
                NODE_HEALTH,
                NodeHealthChanged(
                    node=node, health=health, reasons=("xid_79",), at=datetime.now(UTC)
                ),
                source="/tests",
            )
        finally:
            await broker.stop()

    await publish_health("quarantined")

    async def cordoned() -> bool:
        current = await core.read_node(node)
        return (
            bool(current.spec.unschedulable)
            and current.metadata.labels.get("gpucloud.io/health") == "quarantined"
        )

    await eventually(cordoned, timeout=30)
    spec = await api.spec(gpus=1, gpu_type=product)
    tenant = await api.tenant()
    created = await api.start(tenant, spec)

    async def unschedulable_message() -> str | None:
        instance = await api.get(tenant, created["instanceID"])
        return instance["message"] if instance["state"] == "pending" else None

    message = await eventually(unschedulable_message, timeout=30)
    assert "unschedulable" in message.lower() or "didn't match" in message

    await publish_health("healthy")
    running = await api.wait_state(tenant, created["instanceID"], "running")
    assert running["node"] == node


async def test_killed_mid_create_converges_without_orphans_or_leaked_quota(
    api: Instances, kube: k8s.ApiClient, lone_gpu_node: tuple[str, str]
) -> None:
    _, product = lone_gpu_node
    spec = await api.spec(gpus=1, gpu_type=product)
    tenant = await api.tenant(max_gpus=3, max_instances=3)
    ids = [(await api.start(tenant, spec))["instanceID"] for _ in range(3)]
    os.kill(int(layout.pid_file("instances").read_text()), signal.SIGKILL)

    # While it is down: a pod that no instance owns, as a crash could leave behind.
    core = k8s.CoreV1Api(kube)
    namespace = (
        (await core.list_namespace(label_selector=f"gpucloud.io/tenant={tenant}"))
        .items[0]
        .metadata.name
    )
    labels = {
        "gpucloud.io/managed": "true",
        "gpucloud.io/tenant": tenant,
        "gpucloud.io/instance": "ghost",
    }
    orphan: Any = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "inst-ghost", "namespace": namespace, "labels": labels},
        "spec": {
            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": "c",
                    "image": "x",
                    # Its own requests: the kill may come before the namespace's
                    # LimitRange, which would fill them in, is applied.
                    "resources": {
                        "requests": {"cpu": "100m", "memory": "64Mi"},
                        "limits": {"cpu": "100m", "memory": "64Mi"},
                    },
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
        },
    }
    try:
        await core.create_namespaced_pod(namespace, orphan)
    finally:  # the service comes back even if this fails, for the tests after this one
        restart = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, str(STACK), "up"],
            capture_output=True,
            text=True,
            check=False,
        )
    assert restart.returncode == 0, restart.stderr
    try:
        for instance_id in ids:
            await api.wait_state(tenant, instance_id, "running", timeout=90)
    except AssertionError as late:  # what the cluster shows, for whoever reads the failure
        pods = await core.list_namespaced_pod(namespace)
        shown = [
            (pod.metadata.name, pod.status.phase, pod.spec.node_name,
             [(c.type, c.status, c.reason) for c in pod.status.conditions or []])
            for pod in pods.items
        ]  # fmt: skip
        log = layout.log_file("instances").read_text(errors="replace").splitlines()
        about = [line for line in log if any(i in line for i in ids)][-20:]
        raise AssertionError(
            f"{late}; pods of {namespace}: {shown}; the service's log of them: {about}"
        ) from late

    async def pods_match_instances() -> bool:
        pods = await core.list_namespaced_pod(namespace, label_selector="gpucloud.io/managed=true")
        live = {
            pod.metadata.labels["gpucloud.io/instance"]
            for pod in pods.items
            if not pod.metadata.deletion_timestamp
        }
        return live == set(ids)

    await eventually(pods_match_instances, timeout=60)

    # No quota leaked: with all three stopped, three fit again.
    await api.stop_started()
    for instance_id in ids:
        await api.wait_state(tenant, instance_id, "stopped")
    again = [await api.start(tenant, spec) for _ in range(3)]
    assert len({instance["instanceID"] for instance in again}) == 3


async def test_concurrent_starts_admit_exactly_the_quota(api: Instances) -> None:
    """Fifty starts at once against a quota of ten: ten admitted, forty refused."""
    spec = await api.spec(gpus=1, gpu_type="NVIDIA-L40S")
    tenant = await api.tenant(max_gpus=64, max_instances=10)
    await api.start(tenant, spec)  # the tenant is provisioned from here on
    body = {"image": "jupyter/base-notebook:latest", "specName": spec}
    auth = api.as_("tenant-user", tenant)

    async def start() -> int:
        response = await api.http.post("/gpu-instances", json=body, auth=auth)
        if response.status_code == 202:
            api.started.append((tenant, response.json()["instanceID"]))
        return response.status_code

    answers = await asyncio.gather(*(start() for _ in range(50)))
    assert sorted(set(answers)) == [202, 422]
    assert answers.count(202) == 9  # with the first one: exactly ten
    listed = await api.http.get("/gpu-instances", params={"limit": 100}, auth=auth)
    assert len(listed.json()["items"]) == 10


async def test_a_stopped_instance_starts_again_within_its_quota(api: Instances) -> None:
    """A start takes a stopped instance back through the start path, with the same id
    and a new stay on a node; its events go on numbered from the stop, so metering
    bills the two stays apart. A start that does not fit the quota is refused at once;
    a deleted instance cannot be started."""
    spec = await api.spec(gpus=8)
    tenant = await api.tenant(max_gpus=8, max_instances=4)
    user = api.as_("tenant-user", tenant)
    first = await api.start(tenant, spec)
    instance_id = first["instanceID"]
    await api.wait_state(tenant, instance_id, "running")
    assert (await api.http.post(f"/gpu-instances/{instance_id}/stop", auth=user)).status_code == 202
    await api.wait_state(tenant, instance_id, "stopped")

    # Another instance holds the tenant's 8 GPUs now: the start does not fit.
    other = await api.start(tenant, spec)
    refused = await api.http.post(f"/gpu-instances/{instance_id}/start", auth=user)
    assert refused.status_code == 422, refused.text
    assert (refused.json()["code"], refused.json()["limit"]) == ("quota_exceeded", "max_gpus")
    assert (await api.get(tenant, instance_id))["state"] == "stopped"
    await api.http.post(f"/gpu-instances/{other['instanceID']}/stop", auth=user)
    await api.wait_state(tenant, other["instanceID"], "stopped")

    started = await api.http.post(f"/gpu-instances/{instance_id}/start", auth=user)
    assert started.status_code == 202, started.text
    # Asked and still to be carried out: a client waits for it, and knows when it was
    # refused (false again with the instance still stopped, `message` saying why).
    assert (started.json()["state"], started.json()["startRequested"]) == ("stopped", True)
    running = await api.wait_state(tenant, instance_id, "running")
    assert running["startRequested"] is False
    assert [step["state"] for step in running["history"]][4:] == [
        "stopping", "stopped", "pending", "scheduled", "ready", "running",
    ]  # fmt: skip
    events = await eventually(
        lambda: _at_least(lifecycle_events(api.kafka, tenant, instance_id), 10), timeout=20
    )
    assert [e["sequence"] for e in events] == list(range(1, 11))
    assert events[6]["state"] == "pending"
    assert events[6]["node"] is None

    await api.http.post(f"/gpu-instances/{instance_id}/stop", auth=user)
    await api.wait_state(tenant, instance_id, "stopped")
    assert (await api.http.delete(f"/gpu-instances/{instance_id}", auth=user)).status_code == 202
    await api.wait_state(tenant, instance_id, "deleted")
    gone = await api.http.post(f"/gpu-instances/{instance_id}/start", auth=user)
    assert gone.status_code == 409, gone.text
    assert gone.headers["content-type"] == "application/problem+json"


def _once_each(published: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events as consumers keep them: delivery is at least once (a controller
    that lost its lead publishes its outboxes again, under the same ids), so a
    repeated id must repeat the same event, and counts once."""
    kept: dict[str, dict[str, Any]] = {}
    for event in published:
        assert kept.setdefault(event["id"], event) == event, f"event {event['id']} changed"
    return list(kept.values())


async def _at_least(
    events: Awaitable[list[dict[str, Any]]], count: int
) -> list[dict[str, Any]] | None:
    found = _once_each(await events)
    return found if len(found) >= count else None
