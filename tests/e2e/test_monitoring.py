"""Monitoring over the real stack: telemetry from the simulated source (run here, for
test-owned kwok nodes), alerts, node health with placement, tenant isolation, the
dead-letter topic, and the agent's own checks. The pure parts (tiers, health, rules,
roll-ups) are tests/unit/monitoring/test_engines.py."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aiohttp import web
from aiokafka import AIOKafkaProducer
from kubernetes_asyncio import client as k8s
from pymongo import AsyncMongoClient

from gpucloud_agent.simulated import Placement, SimulatedFleet
from gpucloud_libs.events import NodeInventory, NodeReleaseRequested, TelemetryBatch
from gpucloud_libs.kafka import create_broker, publish_event
from gpucloud_libs.kafka_connection import KafkaConnection
from gpucloud_libs.node_seals import ReportT, node_key, seal
from gpucloud_libs.topics import ALERTS, TELEMETRY
from gpucloud_stack.fleet import cpu_node, gpu_node

from .conftest import stack_service_env
from .platform import Platform, assert_problem, bearer
from .support import as_its_node, eventually, loopback_server, read_topic, unique


def test_the_agent_says_clearly_when_there_is_no_gpu() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gpucloud_agent", "--once"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 3, done.stderr
    report = json.loads(done.stdout)
    assert report["nvml"] == "unavailable"
    assert "NVML" in report["reason"]


def test_the_agent_check_names_what_is_missing_and_its_fix() -> None:
    """`--check` on a host with no GPU: exit 3, the driver's failure with its fix, and
    Kafka checked with the agent's own principal, which a wrong password fails."""
    kafka = {k: v for k, v in stack_service_env("agent").items() if k.startswith("GPUCLOUD_KAFKA")}

    def check(**changes: str) -> subprocess.CompletedProcess[str]:
        env = {"PATH": os.environ["PATH"], **kafka, **changes}
        return subprocess.run(
            [sys.executable, "-m", "gpucloud_agent", "--check"],
            capture_output=True, text=True, timeout=60, check=False, env=env,
        )  # fmt: skip

    ready = check()
    assert ready.returncode == 3, ready
    lines = ready.stdout.splitlines()
    assert lines[0].startswith("FAIL driver"), lines
    assert "fix: install the NVIDIA driver" in lines[1], lines
    assert lines[2].startswith("ok   kafka"), lines
    assert f"as {kafka['GPUCLOUD_KAFKA_USERNAME']}: sees gpucloud.telemetry.v1" in lines[2]
    refused = check(GPUCLOUD_KAFKA_PASSWORD="not-the-password")
    assert refused.returncode == 3, refused
    assert any(line.startswith("FAIL kafka") for line in refused.stdout.splitlines()), refused
    assert "GPUCLOUD_KAFKA_PASSWORD" in refused.stdout
    assert "not-the-password" not in refused.stdout + refused.stderr


# --- over the stack ---------------------------------------------------------------------


class Telemetry:
    """A simulated source for test-owned nodes, publishing every second like an agent."""

    def __init__(self, kafka: KafkaConnection, kube: k8s.ApiClient, env: dict[str, str]) -> None:
        self.kafka = kafka
        self.kube = kube
        self.env = env
        #: A node whose reports go under another node's seal (a forger), or none.
        self.sealed_as: dict[str, str | None] = {}
        self.fleet = SimulatedFleet(seed=11)
        self.placements: dict[str, list[Placement]] = {}

    async def node(self, *, product: str, gpus: int = 2) -> str:
        name = unique("mon-node")
        manifest: Any = gpu_node(name, product=product, gpus=gpus, zone="test-zone-a")
        await k8s.CoreV1Api(self.kube).create_node(manifest)
        self.fleet.set_node(name, product, gpus)
        return name

    async def run(self) -> None:
        broker = create_broker(self.kafka, client_id=unique("test-agent"))
        await broker.start()
        try:
            for name in list(self.fleet.nodes):
                await publish_event(
                    broker, TELEMETRY,
                    self._sealed(NodeInventory(node=name, source="simulated", gpus=tuple(self.fleet.inventory(name)), at=datetime.now(UTC))),
                    source="/tests",
                )  # fmt: skip
            while True:
                await self._place()
                at = datetime.now(UTC)
                for name in list(self.fleet.nodes):
                    await publish_event(
                        broker, TELEMETRY,
                        self._sealed(TelemetryBatch(node=name, source="simulated", samples=tuple(self.fleet.sample(name, at)))),
                        source="/tests",
                    )  # fmt: skip
                await asyncio.sleep(1.0)
        finally:
            await broker.stop()

    def _sealed(self, report: ReportT) -> ReportT:
        if report.node not in self.sealed_as:
            return as_its_node(report, self.env)
        signer = self.sealed_as[report.node]
        key = node_key(self.env["GPUCLOUD_TELEMETRY_SECRET"], signer) if signer else None
        return seal(key, report) if key else report

    async def _place(self) -> None:
        """Load follows the instances running on the test nodes."""
        pods = await k8s.CoreV1Api(self.kube).list_pod_for_all_namespaces(
            label_selector="gpucloud.io/instance"
        )
        placed: dict[str, list[Placement]] = {}
        for pod in pods.items:
            labels = pod.metadata.labels
            if pod.spec.node_name in self.fleet.nodes and pod.status.phase == "Running":
                placed.setdefault(pod.spec.node_name, []).append(
                    Placement(labels["gpucloud.io/tenant"], labels["gpucloud.io/instance"], 1)
                )
        for name in self.fleet.nodes:
            self.fleet.place(name, placed.get(name, []))


@pytest.fixture
async def telemetry(
    kafka: KafkaConnection, kube: k8s.ApiClient, stack_env: dict[str, str]
) -> AsyncIterator[Telemetry]:
    source = Telemetry(kafka, kube, stack_env)
    yield source
    for name in list(source.fleet.nodes):
        with contextlib.suppress(Exception):
            await k8s.CoreV1Api(kube).delete_node(name)


@contextlib.asynccontextmanager
async def running(source: Telemetry) -> AsyncIterator[None]:
    task = asyncio.create_task(source.run())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


class Receiver:
    """A webhook receiver on loopback that fails its first call."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.signed: list[tuple[str, bytes]] = []  # (signature header, body) of each call

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.calls.append(json.loads(body))
        self.signed.append((request.headers.get("X-Gpucloud-Signature", ""), body))
        return web.Response(status=500 if len(self.calls) == 1 else 204)

    def verifies(self, secret: str) -> bool:
        """Whether every call was signed with `secret`, as a receiver checks it."""
        for header, body in self.signed:
            fields = dict(part.split("=", 1) for part in header.split(","))
            mac = hmac.new(secret.encode(), f"{fields['t']}.".encode() + body, hashlib.sha256)
            if not hmac.compare_digest(mac.hexdigest(), fields["v1"]):
                return False
        return bool(self.signed)


@pytest.fixture
async def receiver() -> AsyncIterator[tuple[Receiver, str]]:
    hook = Receiver()
    app = web.Application()
    app.router.add_post("/hook", hook.handle)
    async with loopback_server(app) as port:
        yield hook, f"http://127.0.0.1:{port}/hook"


async def test_an_injected_fault_fires_an_alert_and_it_resolves(
    platform: Platform, telemetry: Telemetry, receiver: tuple[Receiver, str], kafka: KafkaConnection
) -> None:
    hook, url = receiver
    node = await telemetry.node(product=unique("SIM-H100"))
    rule = await platform.http.post(
        "/v1/alert-rules",
        json={"name": "too hot", "metric": "temperature_c", "comparison": ">", "threshold": 90,
              "durationS": 3, "severity": "critical", "node": node, "webhookURL": url},
        headers=platform.admin,
    )  # fmt: skip
    assert rule.status_code == 201, rule.text
    rule_id, secret = rule.json()["ruleID"], rule.json()["webhookSecret"]
    assert secret.startswith("whsec_")
    shown = await platform.http.get(f"/v1/alert-rules/{rule_id}", headers=platform.admin)
    assert shown.json()["webhookSecret"] is None  # shown once, when made
    async with running(telemetry):
        await asyncio.sleep(2)
        telemetry.fleet.inject(node, 0, "overheat")
        injected = datetime.now(UTC)

        async def alert(state: str) -> dict[str, Any] | None:
            found = await platform.http.get(
                "/v1/alerts", params={"state": state}, headers=platform.admin
            )
            return next((a for a in found.json() if a["ruleID"] == rule_id), None)

        firing = await eventually(lambda: alert("firing"), timeout=30)
        fired_at = datetime.fromisoformat(firing["firedAt"])
        # Within the rule's duration plus one sampling interval (and a second of slack
        # for the sample already in flight when the fault began).
        assert fired_at - injected <= timedelta(seconds=3 + 1 + 1)
        assert firing["node"] == node
        assert firing["subject"] == SimulatedFleet.uuid(node, 0)
        telemetry.fleet.clear(node)
        resolved = await eventually(lambda: alert("resolved"), timeout=30)
    assert resolved["alertID"] == firing["alertID"]

    events = await read_topic(kafka, ALERTS.name, expect=10**9, timeout=3)
    mine = [
        json.loads(r.value) for r in events if json.loads(r.value)["alert_id"] == firing["alertID"]
    ]
    assert [event["state"] for event in mine] == ["firing", "resolved"]

    async def delivered() -> bool:
        return len(hook.calls) >= 3  # firing (refused, then retried), resolved

    await eventually(delivered, timeout=30)
    assert sorted(call["state"] for call in hook.calls[:3]) == ["firing", "firing", "resolved"]
    assert hook.verifies(secret)
    assert not hook.verifies("whsec_" + "x" * 43)


async def test_deleting_or_disabling_a_rule_ends_its_firing_alert(
    platform: Platform, telemetry: Telemetry, kafka: KafkaConnection
) -> None:
    node = await telemetry.node(product=unique("SIM-H100"))
    rule_ids = []
    for name in ["deleted", "disabled"]:
        rule = await platform.http.post(
            "/v1/alert-rules",
            json={"name": name, "metric": "temperature_c", "comparison": ">", "threshold": 90,
                  "durationS": 1, "severity": "warning", "node": node},
            headers=platform.admin,
        )  # fmt: skip
        assert rule.status_code == 201, rule.text
        rule_ids.append(rule.json()["ruleID"])

    async def alerts(state: str) -> list[dict[str, Any]] | None:
        found = await platform.http.get(
            "/v1/alerts", params={"state": state}, headers=platform.admin
        )
        mine = sorted((a for a in found.json() if a["ruleID"] in rule_ids),
                      key=lambda a: rule_ids.index(a["ruleID"]))  # fmt: skip
        return mine if len(mine) == 2 else None

    async with running(telemetry):
        telemetry.fleet.inject(node, 0, "overheat")  # and it stays hot
        firing = await eventually(lambda: alerts("firing"), timeout=30)
        deleted = await platform.http.delete(
            f"/v1/alert-rules/{rule_ids[0]}", headers=platform.admin
        )
        assert deleted.status_code == 204, deleted.text
        disabled = await platform.http.patch(
            f"/v1/alert-rules/{rule_ids[1]}", json={"enabled": False}, headers=platform.admin
        )
        assert disabled.status_code == 200, disabled.text
        resolved = await eventually(lambda: alerts("resolved"), timeout=30)
    assert [a["alertID"] for a in resolved] == [a["alertID"] for a in firing]
    assert [a["resolution"] for a in resolved] == ["rule_deleted", "rule_disabled"]

    events = await read_topic(kafka, ALERTS.name, expect=10**9, timeout=3)
    ended = {
        event["alert_id"]: event
        for event in (json.loads(r.value) for r in events)
        if event["rule_id"] in rule_ids and event["state"] == "resolved"
    }
    assert [ended[a["alertID"]]["resolution"] for a in firing] == ["rule_deleted", "rule_disabled"]


async def test_a_quarantined_node_is_excluded_from_placement(
    platform: Platform, telemetry: Telemetry, kube: k8s.ApiClient
) -> None:
    product = unique("SIM-A100")
    faulty, sound = await telemetry.node(product=product), await telemetry.node(product=product)
    core = k8s.CoreV1Api(kube)
    async with running(telemetry):
        telemetry.fleet.inject(faulty, 1, "xid79")

        async def quarantined() -> dict[str, Any] | None:
            nodes = (await platform.http.get("/v1/nodes", headers=platform.admin)).json()
            view = next((n for n in nodes if n["node"] == faulty), None)
            return view if view and view["health"] == "quarantined" else None

        view = await eventually(quarantined, timeout=30)
        assert view["healthReasons"] == ["GPU 1: XID 79"]

        async def cordoned() -> bool:
            return bool((await core.read_node(faulty)).spec.unschedulable)

        await eventually(cordoned, timeout=30)
        account = await platform.tenant()
        spec = await platform.spec(gpus=1, gpu_type=product)
        started = []
        for _ in range(2):
            created = await platform.start_instance(account, {"image": "trainer", "specName": spec})
            assert created.status_code == 202, created.text
            started.append(created.json()["instanceID"])

        async def placed() -> list[str] | None:
            nodes = []
            for instance_id in started:
                found = (
                    await platform.http.get(
                        f"/v1/gpu-instances/{instance_id}", headers=bearer(account.admin_key)
                    )
                ).json()
                if found["state"] != "running":
                    return None
                nodes.append(found["node"])
            return nodes

        assert set(await eventually(placed, timeout=60)) == {sound}

        released = await platform.http.post(f"/v1/nodes/{faulty}/release", headers=platform.admin)
        assert released.status_code == 202, released.text

        async def healthy() -> bool:
            nodes = (await platform.http.get("/v1/nodes", headers=platform.admin)).json()
            return any(n["node"] == faulty and n["health"] == "healthy" for n in nodes)

        await eventually(healthy, timeout=30)

        async def uncordoned() -> bool:
            return not (await core.read_node(faulty)).spec.unschedulable

        await eventually(uncordoned, timeout=30)


async def test_telemetry_from_a_node_the_cluster_does_not_have_is_refused(
    platform: Platform, telemetry: Telemetry
) -> None:
    """Any holder of the agent's principal could otherwise add a ghost node to the
    operator's fleet (review M4): its inventory and samples go where a real node's do,
    and only the real one shows."""
    real = await telemetry.node(product=unique("SIM-H100"))
    ghost = unique("ghost-node")
    telemetry.fleet.set_node(ghost, "NVIDIA-H100-80GB-HBM3", 8)  # no Node object
    async with running(telemetry):

        async def listed() -> set[str] | None:
            nodes = (await platform.http.get("/v1/nodes", headers=platform.admin)).json()
            names = {n["node"] for n in nodes}
            return names if real in names else None

        names = await eventually(listed, timeout=30)
        await asyncio.sleep(2)  # two more rounds of the ghost's batches
        names = await listed() or set()
    assert real in names
    assert ghost not in names


async def test_telemetry_not_sealed_by_the_node_it_names_is_refused(
    platform: Platform, telemetry: Telemetry
) -> None:
    """Every agent holds the same Kafka principal: a compromised node reporting in
    another node's name (a fake idle GPU fires that tenant's stop rule, a fake XID
    quarantines the node) is refused, as is a report with no seal (review M4)."""
    honest = await telemetry.node(product=unique("SIM-H100"))
    victim = await telemetry.node(product=unique("SIM-H100"))
    unsealed = await telemetry.node(product=unique("SIM-H100"))
    telemetry.sealed_as = {victim: honest, unsealed: None}
    async with running(telemetry):

        async def listed() -> set[str] | None:
            nodes = (await platform.http.get("/v1/nodes", headers=platform.admin)).json()
            names = {n["node"] for n in nodes}
            return names if honest in names else None

        await eventually(listed, timeout=30)
        await asyncio.sleep(2)  # two more rounds of the others' batches
        names = await listed() or set()
    assert honest in names
    assert victim not in names
    assert unsealed not in names


async def test_an_operator_quarantines_a_node_until_released(
    platform: Platform, telemetry: Telemetry, kube: k8s.ApiClient
) -> None:
    node = await telemetry.node(product=unique("SIM-H100"))
    core = k8s.CoreV1Api(kube)
    async with running(telemetry):

        async def health() -> dict[str, Any] | None:
            nodes = (await platform.http.get("/v1/nodes", headers=platform.admin)).json()
            return next((n for n in nodes if n["node"] == node), None)

        await eventually(health, timeout=30)
        missing = await platform.http.post(
            "/v1/nodes/no-such-node/quarantine", headers=platform.admin, json={"reason": "x"}
        )
        assert missing.status_code == 404, missing.text
        reasonless = await platform.http.post(
            f"/v1/nodes/{node}/quarantine", headers=platform.admin, json={}
        )
        assert reasonless.status_code == 422, reasonless.text

        asked = await platform.http.post(
            f"/v1/nodes/{node}/quarantine",
            headers=platform.admin,
            json={"reason": "fan replacement"},
        )
        assert asked.status_code == 202, asked.text

        async def in_health(wanted: str) -> dict[str, Any] | None:
            view = await health()
            return view if view and view["health"] == wanted else None

        quarantined = await eventually(lambda: in_health("quarantined"), timeout=30)
        assert quarantined["healthReasons"] == ["quarantined by an operator: fan replacement"]

        async def cordoned(wanted: bool) -> bool:
            return bool((await core.read_node(node)).spec.unschedulable) is wanted

        await eventually(lambda: cordoned(True), timeout=30)
        # The node agent's principal writes to the same topic: a release it forges,
        # without the monitoring service's seal, changes nothing (review M4).
        agent = create_broker(
            KafkaConnection.from_env(stack_service_env("agent")), client_id=unique("forger")
        )
        await agent.start()
        try:
            forged = NodeReleaseRequested(node=node, requested_by="root", at=datetime.now(UTC))
            await publish_event(agent, TELEMETRY, forged, source="/gpucloud/monitoring")
        finally:
            await agent.stop()
        # Healthy telemetry keeps coming: the node stays out until an operator says.
        await asyncio.sleep(3)
        assert (await health() or {}).get("health") == "quarantined"

        released = await platform.http.post(f"/v1/nodes/{node}/release", headers=platform.admin)
        assert released.status_code == 202, released.text
        await eventually(lambda: in_health("healthy"), timeout=30)
        await eventually(lambda: cordoned(False), timeout=30)


async def test_an_idle_instance_is_stopped_by_its_tenants_rule(
    platform: Platform, telemetry: Telemetry
) -> None:
    product = unique("SIM-H100")
    node = await telemetry.node(product=product, gpus=2)
    account = await platform.tenant()
    owner = bearer(account.admin_key)
    rule = {
        "name": "stop when idle", "metric": "utilization_gpu_pct", "comparison": "<",
        "threshold": 5, "durationS": 3, "action": "stop_instance",
    }  # fmt: skip
    # Stop-when-idle is a tenant's rule on its own instances, and an idleness test.
    fleet_wide = await platform.http.post("/v1/alert-rules", json=rule, headers=platform.admin)
    assert_problem(fleet_wide, 422)
    busy_rule = await platform.http.post(
        "/v1/alert-rules", json={**rule, "comparison": ">"}, headers=owner
    )
    assert_problem(busy_rule, 422)
    made = await platform.post_as_tenant(account, "/v1/alert-rules", rule)
    assert made.status_code == 201, made.text
    assert made.json()["action"] == "stop_instance"

    spec = await platform.spec(gpus=1, gpu_type=product)
    started = []
    for _ in range(2):
        created = await platform.start_instance(account, {"image": "trainer", "specName": spec})
        assert created.status_code == 202, created.text
        started.append(created.json()["instanceID"])

    async def state_of(instance_id: str) -> dict[str, Any]:
        found = await platform.http.get(f"/v1/gpu-instances/{instance_id}", headers=owner)
        return dict(found.json())

    async with running(telemetry):

        async def both_running() -> bool:
            states = [(await state_of(i))["state"] for i in started]
            return states == ["running", "running"]

        await eventually(both_running, timeout=60)

        async def gpu_of(instance_id: str) -> tuple[int] | None:
            """(its GPU's index,) once the simulator placed it: index 0 is an answer too."""
            placed = telemetry.fleet.nodes[node].placed
            return next(((gpu,) for gpu, (_, i) in placed.items() if i == instance_id), None)

        idle, busy = started
        [gpu] = await eventually(lambda: gpu_of(idle), timeout=30)
        telemetry.fleet.inject(node, gpu, "idle")

        async def stopped() -> dict[str, Any] | None:
            found = await state_of(idle)
            return found if found["state"] == "stopped" else None

        ended = await eventually(stopped, timeout=60)
        [reason] = [t["reason"] for t in ended["history"] if t["state"] == "stopping"]
        assert reason.startswith("idle: GPU utilization_gpu_pct"), ended
        assert (await state_of(busy))["state"] == "running"  # its GPU works

    alerts = (await platform.http.get("/v1/alerts", headers=owner)).json()
    mine = [a for a in (alerts["items"] if isinstance(alerts, dict) else alerts)
            if a["ruleID"] == made.json()["ruleID"]]  # fmt: skip
    assert [(a["instanceID"], a["action"]) for a in mine] == [(idle, "stop_instance")]


async def test_an_instance_is_not_billed_for_time_on_its_quarantined_node(
    platform: Platform, telemetry: Telemetry
) -> None:
    product = unique("SIM-L40S")
    node = await telemetry.node(product=product, gpus=1)
    account = await platform.tenant()
    owner = bearer(account.admin_key)
    async with running(telemetry):
        spec = await platform.spec(gpus=1, gpu_type=product)
        created = await platform.start_instance(account, {"image": "trainer", "specName": spec})
        assert created.status_code == 202, created.text
        instance_id = created.json()["instanceID"]

        async def in_state(state: str) -> dict[str, Any] | None:
            found = await platform.http.get(f"/v1/gpu-instances/{instance_id}", headers=owner)
            return found.json() if found.json()["state"] == state else None

        assert (await eventually(lambda: in_state("running"), timeout=60))["node"] == node
        await asyncio.sleep(2)
        telemetry.fleet.inject(node, 0, "xid79")

        async def quarantined() -> dict[str, Any] | None:
            nodes = (await platform.http.get("/v1/nodes", headers=platform.admin)).json()
            view = next((n for n in nodes if n["node"] == node), None)
            return view if view and view["health"] == "quarantined" else None

        since = datetime.fromisoformat((await eventually(quarantined, timeout=30))["healthSince"])
        await asyncio.sleep(2)
        stopping = await platform.http.delete(f"/v1/gpu-instances/{instance_id}", headers=owner)
        assert stopping.status_code == 202, stopping.text
        stopped = await eventually(lambda: in_state("stopped"), timeout=60)

    at = {step["state"]: datetime.fromisoformat(step["at"]) for step in stopped["history"]}
    held_us = (at["stopped"] - at["scheduled"]) // timedelta(microseconds=1)
    lost_us = (at["stopped"] - since) // timedelta(microseconds=1)

    async def usage() -> dict[str, Any] | None:
        found = await platform.http.get(f"/v1/usage/instances/{instance_id}", headers=owner)
        total: dict[str, Any] = found.json()["total"]
        counted = total["gpuMicroseconds"] + total["creditedGpuMicroseconds"]
        # Stored times are milliseconds: allow one either side.
        return (
            total if total["creditedGpuMicroseconds"] and abs(counted - held_us) <= 1000 else None
        )

    total = await eventually(usage, timeout=60)
    assert abs(total["creditedGpuMicroseconds"] - lost_us) <= 1000
    assert total["creditedGpuMicroseconds"] >= 2_000_000  # the 2 s after the fault, at least
    assert total["gpuMicroseconds"] >= 2_000_000  # the 2 s before it, at least, are billed


async def test_a_tenant_reads_only_its_own_gpu_metrics(
    platform: Platform, telemetry: Telemetry
) -> None:
    product = unique("SIM-L40S")
    node = await telemetry.node(product=product, gpus=1)
    mine, other = await platform.tenant(), await platform.tenant()
    spec = await platform.spec(gpus=1, gpu_type=product)
    created = await platform.start_instance(mine, {"image": "trainer", "specName": spec})
    assert created.status_code == 202, created.text
    instance_id = created.json()["instanceID"]
    gpu = SimulatedFleet.uuid(node, 0)
    async with running(telemetry):

        async def series() -> dict[str, Any] | None:
            found = await platform.http.get(
                f"/v1/gpu-instances/{instance_id}/metrics", headers=bearer(mine.admin_key)
            )
            return found.json() if found.status_code == 200 and found.json()["points"] else None

        # Series are closed one-minute windows: the first arrives after a minute boundary.
        points = (await eventually(series, timeout=150, interval=2))["points"]
        assert points[0]["gpus"] == 1
        assert points[0]["utilizationGpuPct"] >= 70  # busy: the instance runs there
        gpus = (await platform.http.get("/v1/gpus", headers=bearer(mine.admin_key))).json()
        assert [g["gpuUUID"] for g in gpus] == [gpu]
        assert gpus[0]["tenantID"] is None  # tenants are not told whose GPU it is

    others = bearer(other.admin_key)
    assert (await platform.http.get("/v1/gpus", headers=others)).json() == []
    assert_problem(await platform.http.get(f"/v1/gpus/{gpu}/metrics", headers=others), 404)
    assert_problem(
        await platform.http.get(f"/v1/gpu-instances/{instance_id}/metrics", headers=others), 404
    )
    tenant_view = await platform.http.get("/v1/metrics/tenant", headers=others)
    assert tenant_view.json()["points"] == []
    assert_problem(await platform.http.get("/v1/nodes", headers=others), 403)
    assert_problem(await platform.http.get("/v1/fleet", headers=others), 403)
    admin_view = await platform.http.get(f"/v1/gpus/{gpu}/metrics", headers=platform.admin)
    assert admin_view.json()["points"]
    fleet = (await platform.http.get("/v1/fleet", headers=platform.admin)).json()
    assert any(group["gpuType"] == product and group["gpusInUse"] == 1 for group in fleet["groups"])


async def test_a_malformed_telemetry_batch_goes_to_the_dead_letter_topic(
    platform: Platform, kafka: KafkaConnection, kube: k8s.ApiClient, stack_env: dict[str, str]
) -> None:
    marker = unique("garbage")
    producer = AIOKafkaProducer(**kafka.client_options())
    await producer.start()
    try:
        await producer.send_and_wait(TELEMETRY.name, json.dumps({"not": marker}).encode(), key=b"x")
    finally:
        await producer.stop()
    node = unique("inventory-only")
    # A node of the cluster's (monitoring refuses others' telemetry), where nothing is placed.
    cordoned: Any = cpu_node(node) | {"spec": {"unschedulable": True}}
    await k8s.CoreV1Api(kube).create_node(cordoned)
    broker = create_broker(kafka, client_id=unique("test-agent"))
    await broker.start()
    try:
        await publish_event(
            broker, TELEMETRY,
            as_its_node(NodeInventory(node=node, source="nvml", unavailable_reason="no driver", at=datetime.now(UTC)), stack_env),
            source="/tests",
        )  # fmt: skip
    finally:
        await broker.stop()

    async def parked() -> bool:
        records = await read_topic(
            kafka, "gpucloud.dlq.gpucloud-monitoring", expect=10**9, timeout=3
        )
        return any(marker.encode() in record.value for record in records)

    await eventually(parked, timeout=30)

    async def next_one_counted() -> dict[str, Any] | None:
        nodes = (await platform.http.get("/v1/nodes", headers=platform.admin)).json()
        return next((n for n in nodes if n["node"] == node), None)

    view = await eventually(next_one_counted, timeout=30)
    assert view["unavailableReason"] == "no driver"
    await k8s.CoreV1Api(kube).delete_node(node)


async def test_a_deleted_tenants_alert_rules_go_with_it(
    platform: Platform, mongo: AsyncMongoClient[dict[str, Any]]
) -> None:
    """Every rule is evaluated on every sample of its GPUs and may call a webhook: a
    deleted tenant's rules are removed when the gateway says it is deleted."""
    account = await platform.tenant()
    rule = {"name": "hot", "metric": "temperature_c", "threshold": 90, "durationS": 60}
    made = await platform.http.post("/v1/alert-rules", json=rule, headers=bearer(account.admin_key))
    assert made.status_code == 201, made.text
    rules = mongo["gpucloud_monitoring"]["alert_rules"]
    assert await rules.count_documents({"tenant_id": account.tenant_id}) == 1
    gone = await platform.http.delete(f"/v1/tenants/{account.tenant_id}", headers=platform.admin)
    assert gone.status_code == 204, gone.text

    async def removed() -> bool:
        return await rules.count_documents({"tenant_id": account.tenant_id}) == 0

    await eventually(removed, timeout=30)
