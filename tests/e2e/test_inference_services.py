"""Inference services end to end: kwok GPU nodes whose pods get loopback addresses,
a real little HTTP server on each replica's address, and the gateway's one URL in
front of them, on the real Kubernetes Deployment controller.

kwok reports a replica ready as soon as it is bound, before anything listens on
its address; the servers here start a moment later, as a real server would after
its readiness probe first passed. The gateway tries another replica when one
refuses the connection, which is what keeps every request answered through a
rolling update.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx
import pytest
from aiohttp import web
from kubernetes_asyncio import client as k8s

from gpucloud_instances.inference.manifests import REPLICA_DRAIN_S
from gpucloud_instances.manifests import HEALTH as HEALTH_LABEL
from gpucloud_libs.kafka_connection import KafkaConnection
from gpucloud_libs.naming import (
    SERVICE_LABEL,
    service_workload_id,
    storage_secret_name,
    tenant_namespace,
)
from gpucloud_libs.topics import INFERENCE_LIFECYCLE
from gpucloud_metering import ledger

from .platform import Platform, TenantAccount, assert_problem, bearer
from .support import aggregate_events, eventually, loopback_gpu_nodes, unique, url_host, url_path

PORT = 18_080
#: Each token of /stream comes this long after the one before.
TOKEN_GAP_S = 0.4
#: How long /slow takes to answer: a request that stays in flight.
SLOW_S = 1.0


@dataclass
class LoopbackFleet:
    product: str
    nodes: list[str]


@pytest.fixture
async def loopback_fleet(kube: k8s.ApiClient) -> AsyncIterator[LoopbackFleet]:
    """Three kwok GPU nodes of a product of their own, in two zones, whose pods get
    127.x.y.z addresses."""
    async with loopback_gpu_nodes(kube, 3) as (product, names):
        yield LoopbackFleet(product, names)


@dataclass
class Replicas:
    """A server on every replica's address, started as the replica appears and
    stopped as it goes: what each replica's container would be."""

    kube: k8s.ApiClient
    namespace: str
    service_id: str
    servers: dict[str, web.AppRunner] = field(default_factory=dict)
    #: pod address -> the replica's pod name and revision
    pods: dict[str, tuple[str, str]] = field(default_factory=dict)
    #: pod address -> when its replica was seen terminating or gone
    gone_since: dict[str, float] = field(default_factory=dict)

    async def follow(self) -> None:
        core = k8s.CoreV1Api(self.kube)
        while True:
            listed = await core.list_namespaced_pod(
                self.namespace, label_selector=f"{SERVICE_LABEL}={self.service_id}"
            )
            live = {
                pod.status.pod_ip: pod
                for pod in listed.items
                if pod.status.pod_ip and not pod.metadata.deletion_timestamp
            }
            for address, pod in live.items():
                name = pod.metadata.name
                if address in self.servers and self.pods[address][0] != name:
                    # The address went to a new replica: its server answers as that one.
                    await self.servers.pop(address).cleanup()
                if address not in self.servers:
                    self.pods[address] = (name, pod.metadata.labels["gpucloud.io/revision"])
                    self.servers[address] = await _replica_server(address, name)
            clock = time.monotonic()
            for address in [a for a in self.servers if a not in live]:
                # Terminating or gone: a real replica keeps serving through its preStop
                # drain, then exits (kwok runs no preStop and removes the pod at once).
                since = self.gone_since.setdefault(address, clock)
                if clock - since >= REPLICA_DRAIN_S:
                    del self.gone_since[address]
                    await self.servers.pop(address).cleanup()
            for address in live:
                self.gone_since.pop(address, None)
            await asyncio.sleep(0.05)

    async def close(self) -> None:
        for runner in self.servers.values():
            await runner.cleanup()


async def _replica_server(address: str, name: str) -> web.AppRunner:
    async def hello(_: web.Request) -> web.Response:
        return web.json_response({"replica": name})

    async def stream(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for index in range(5):
            await response.write(f"data: token {index}\n\n".encode())
            await asyncio.sleep(TOKEN_GAP_S)
        await response.write_eof()
        return response

    async def slow(_: web.Request) -> web.Response:
        await asyncio.sleep(SLOW_S)
        return web.json_response({"replica": name})

    app = web.Application()
    app.add_routes(
        [web.get("/", hello), web.get("/healthz", hello), web.get("/stream", stream),
         web.get("/slow", slow)]
    )  # fmt: skip
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, address, PORT).start()
    return runner


@dataclass
class RunningService:
    account: TenantAccount
    service_id: str
    host: str
    replicas: Replicas

    @property
    def headers(self) -> dict[str, str]:
        return {**bearer(self.account.admin_key), "Host": self.host}

    @property
    def path(self) -> str:
        return f"/v1/inference-services/{self.service_id}"


async def _service_state(
    platform: Platform, service: RunningService, *, state: str, ready: int, revision: int = 1
) -> dict[str, Any] | None:
    got = await platform.http.get(service.path, headers=bearer(service.account.admin_key))
    body: dict[str, Any] = got.json()
    settled = (
        body["state"] == state
        and body["revision"] == revision
        and body["updatedReplicas"] == ready
        and len(body["replicas"]) == ready
    )
    return body if settled else None


@pytest.fixture
async def make_service(
    platform: Platform, kube: k8s.ApiClient, loopback_fleet: LoopbackFleet
) -> AsyncIterator[Any]:
    """Start a service of `replicas` on the loopback fleet; wait until they all serve."""
    followers: list[tuple[asyncio.Task[None], Replicas]] = []

    async def make(replicas: int, **extra: Any) -> RunningService:
        account = await platform.tenant(max_gpus=16)
        spec = await platform.spec(gpu_type=loopback_fleet.product)
        service_id = unique("llm")
        body = {
            "serviceID": service_id, "specName": spec, "image": "registry.test/llm:1",
            "port": PORT, "readinessPath": "/healthz", "minReplicas": replicas, **extra,
        }  # fmt: skip
        created = await platform.post_as_tenant(account, "/v1/inference-services", body)
        assert created.status_code == 201, created.text
        service = created.json()
        host = url_host(service["url"])
        followed = Replicas(kube, tenant_namespace(account.tenant_id), service_id)
        followers.append((asyncio.create_task(followed.follow()), followed))
        running = RunningService(account, service_id, host, followed)
        await eventually(
            lambda: _service_state(platform, running, state="ready", ready=replicas), timeout=60
        )
        await eventually(lambda: _all_serving(running, replicas), timeout=20)
        return running

    yield make
    for task, followed in followers:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await followed.close()


async def _all_serving(service: RunningService, replicas: int) -> bool:
    return len(service.replicas.servers) >= replicas


async def test_requests_spread_evenly_across_replicas_on_distinct_nodes(
    platform: Platform, make_service: Any
) -> None:
    service: RunningService = await make_service(3)
    body = (await platform.http.get(service.path, headers=bearer(service.account.admin_key))).json()
    assert len({replica["node"] for replica in body["replicas"]}) == 3, body["replicas"]
    assert url_host(body["url"]) == service.host
    assert url_path(body["url"]) == "/"

    gate = asyncio.Semaphore(8)

    async def one() -> str:
        async with gate:
            answer = await platform.http.get("/", headers=service.headers)
            assert answer.status_code == 200, answer.text
            replica: str = answer.json()["replica"]
            return replica

    served = Counter(await asyncio.gather(*(one() for _ in range(300))))
    assert len(served) == 3, served
    for count in served.values():
        assert abs(count - 100) <= 20, served  # within 20 % of even


async def test_streaming_passes_through_token_by_token(
    platform: Platform, make_service: Any
) -> None:
    service: RunningService = await make_service(1)
    started = time.monotonic()
    arrivals: list[float] = []
    async with platform.http.stream("GET", "/stream", headers=service.headers) as answer:
        assert answer.status_code == 200
        async for chunk in answer.aiter_raw():
            if chunk:
                arrivals.append(time.monotonic() - started)
    assert len(arrivals) >= 2, arrivals
    # The first token arrived well before the stream ended: nothing buffered it.
    assert arrivals[-1] - arrivals[0] >= 3 * TOKEN_GAP_S, arrivals


async def test_rolling_update_under_load_fails_no_request_and_rolls_back(
    platform: Platform, make_service: Any
) -> None:
    service: RunningService = await make_service(3)
    outcomes: Counter[int] = Counter()
    seen_revisions: Counter[str] = Counter()
    stop = asyncio.Event()

    async def load() -> None:
        while not stop.is_set():
            try:
                answer = await platform.http.get("/", headers=service.headers)
            except httpx.HTTPError:
                outcomes[0] += 1
                continue
            outcomes[answer.status_code] += 1
            if answer.status_code == 200:
                name = answer.json()["replica"]
                revision = next(
                    (rev for pod, rev in service.replicas.pods.values() if pod == name), "?"
                )
                seen_revisions[revision] += 1

    workers = [asyncio.create_task(load()) for _ in range(4)]
    try:
        await asyncio.sleep(1)
        changed = await platform.http.patch(
            service.path,
            json={"image": "registry.test/llm:2", "env": [{"name": "MODEL", "value": "v2"}]},
            headers=bearer(service.account.admin_key),
        )
        assert changed.status_code == 200, changed.text
        assert changed.json()["revision"] == 2
        await eventually(
            lambda: _service_state(platform, service, state="ready", ready=3, revision=2),
            timeout=90,
        )
        await asyncio.sleep(1)
    finally:
        stop.set()
        await asyncio.gather(*workers)
    assert set(outcomes) == {200}, outcomes  # every request answered, none failed
    assert seen_revisions["1"], seen_revisions
    assert seen_revisions["2"], seen_revisions

    rolled = await platform.http.post(
        f"{service.path}/rollback", json={"revision": 1}, headers=bearer(service.account.admin_key)
    )
    assert rolled.status_code == 200, rolled.text
    body = rolled.json()
    assert (body["revision"], body["image"], body["env"]) == (3, "registry.test/llm:1", [])
    assert [(r["revision"], r["rolledBackFrom"]) for r in body["revisions"]] == [
        (1, None), (2, None), (3, 1),
    ]  # fmt: skip
    await eventually(
        lambda: _service_state(platform, service, state="ready", ready=3, revision=3), timeout=90
    )


async def test_a_replica_lost_with_its_node_is_replaced_on_another(
    platform: Platform, kube: k8s.ApiClient, make_service: Any
) -> None:
    service: RunningService = await make_service(2)
    body = (await platform.http.get(service.path, headers=bearer(service.account.admin_key))).json()
    lost = body["replicas"][0]["node"]
    await k8s.CoreV1Api(kube).delete_node(lost)

    async def replaced() -> dict[str, Any] | None:
        now = await _service_state(platform, service, state="ready", ready=2)
        if now is None or any(replica["node"] == lost for replica in now["replicas"]):
            return None
        return now

    healed = await eventually(replaced, timeout=60)
    assert all(replica["ready"] for replica in healed["replicas"])
    await eventually(lambda: _all_serving(service, 2), timeout=20)
    answer = await platform.http.get("/", headers=service.headers)
    assert answer.status_code == 200, answer.text


async def test_a_replica_on_a_quarantined_node_moves_to_a_healthy_one(
    platform: Platform, kube: k8s.ApiClient, make_service: Any
) -> None:
    service: RunningService = await make_service(2)
    body = (await platform.http.get(service.path, headers=bearer(service.account.admin_key))).json()
    sick = body["replicas"][0]["node"]
    # What the instances service does when monitoring quarantines a node (NodeCordons).
    patch = {"metadata": {"labels": {HEALTH_LABEL: "quarantined"}}, "spec": {"unschedulable": True}}
    await k8s.CoreV1Api(kube).patch_node(sick, patch)

    async def moved() -> dict[str, Any] | None:
        now = await _service_state(platform, service, state="ready", ready=2)
        if now is None or any(replica["node"] == sick for replica in now["replicas"]):
            return None
        return now

    await eventually(moved, timeout=60)


async def test_other_tenants_and_keys_without_connect_are_refused(
    platform: Platform, make_service: Any
) -> None:
    service: RunningService = await make_service(1)
    other = await platform.tenant()
    assert_problem(await platform.http.get(service.path, headers=bearer(other.admin_key)), 404)
    as_other = {**bearer(other.admin_key), "Host": service.host}
    assert_problem(await platform.http.get("/", headers=as_other), 404)
    # The same name under the other tenant's label is not this service.
    forged = service.host.replace(
        tenant_namespace(service.account.tenant_id).removeprefix("gpc-"),
        tenant_namespace(other.tenant_id).removeprefix("gpc-"),
    )
    assert_problem(await platform.http.get("/", headers={**as_other, "Host": forged}), 404)
    assert_problem(await platform.http.get("/", headers={"Host": service.host}), 401)
    _, _, no_connect = await platform.member(service.account, scopes=["instances:read"])
    assert_problem(
        await platform.http.get("/", headers={**bearer(no_connect), "Host": service.host}),
        403,
        "insufficient_scope",
    )


async def test_quota_covers_the_most_replicas_and_the_surge_and_deletion_frees_it(
    platform: Platform, loopback_fleet: LoopbackFleet
) -> None:
    account = await platform.tenant(max_gpus=4)
    spec = await platform.spec(gpu_type=loopback_fleet.product)
    body = {"specName": spec, "image": "registry.test/llm:1", "port": PORT}
    too_big = await platform.post_as_tenant(
        account, "/v1/inference-services",
        {**body, "serviceID": "big", "minReplicas": 2, "maxReplicas": 4},
    )  # fmt: skip
    assert_problem(too_big, 422, "quota_exceeded")  # (4 + 1 surge) x 1 GPU > 4

    created = await platform.post_as_tenant(
        account, "/v1/inference-services", {**body, "serviceID": "fits", "maxReplicas": 3}
    )
    assert created.status_code == 201, created.text
    again = await platform.post_as_tenant(
        account, "/v1/inference-services", {**body, "serviceID": "fits"}
    )
    assert_problem(again, 409)
    grown = await platform.http.patch(
        "/v1/inference-services/fits", json={"maxReplicas": 4}, headers=bearer(account.admin_key)
    )
    assert_problem(grown, 422, "quota_exceeded")

    deleted = await platform.http.delete(
        "/v1/inference-services/fits", headers=bearer(account.admin_key)
    )
    assert deleted.status_code == 202, deleted.text
    assert deleted.json()["state"] == "deleting"

    async def recreated() -> httpx.Response | None:
        answer = await platform.post_as_tenant(
            account, "/v1/inference-services",
            {**body, "serviceID": "fits", "minReplicas": 1, "maxReplicas": 3},
        )  # fmt: skip
        return answer if answer.status_code == 201 else None

    # The name and the quota come back once the last replica is gone.
    await eventually(recreated, timeout=60)


async def test_concurrent_changes_leave_the_quota_holding_what_the_winner_holds(
    platform: Platform,
) -> None:
    """Two PATCHes at once, one growing the service and one shrinking it: whichever is
    recorded, the quota ledger holds that configuration's GPUs, never the loser's or the
    one before (review M2). Checked as a tenant sees it: what other starts fit after."""
    quota = 12
    account = await platform.tenant(max_gpus=quota, max_instances=20)
    spec = await platform.spec()
    headers = bearer(account.admin_key)
    created = await platform.post_as_tenant(
        account, "/v1/inference-services",
        {"serviceID": "raced", "specName": spec, "image": "registry.test/llm:1", "port": PORT,
         "minReplicas": 0, "maxReplicas": 3, "autoscaling": {"targetInFlight": 4}},
    )  # fmt: skip
    assert created.status_code == 201, created.text
    path = "/v1/inference-services/raced"
    whole = await platform.spec(gpus=quota)  # never fits beside the service: a probe
    for _ in range(25):
        grow, shrink = await asyncio.gather(
            platform.http.patch(path, json={"maxReplicas": 8}, headers=headers),
            platform.http.patch(path, json={"maxReplicas": 2}, headers=headers),
        )
        assert {grow.status_code, shrink.status_code} <= {200, 409}, (grow.text, shrink.text)
        service = (await platform.http.get(path, headers=headers)).json()
        probe = await platform.start_instance(account, {"image": "busybox", "specName": whole})
        held_now = assert_problem(probe, 422, "quota_exceeded")["in_use"]
        assert held_now == service["maxReplicas"] + service["strategy"]["maxSurge"], (
            held_now, service["maxReplicas"], grow.status_code, shrink.status_code,
        )  # fmt: skip
    service = (await platform.http.get(path, headers=headers)).json()
    held = (service["maxReplicas"] + service["strategy"]["maxSurge"]) * 1
    admitted = 0
    while True:
        started = await platform.start_instance(account, {"image": "busybox", "specName": spec})
        if started.status_code != 202:
            assert_problem(started, 422, "quota_exceeded")
            break
        admitted += 1
    assert admitted == quota - held, (admitted, service["maxReplicas"])


async def test_bad_changes_are_refused_with_clear_errors(
    platform: Platform, loopback_fleet: LoopbackFleet
) -> None:
    account = await platform.tenant()
    spec = await platform.spec(gpu_type=loopback_fleet.product)
    base = {"specName": spec, "image": "registry.test/llm:1", "port": PORT}
    for wrong in (
        {"minReplicas": 3, "maxReplicas": 2},
        {"strategy": {"maxSurge": 0, "maxUnavailable": 0}},
        {"port": 0},
        {"readinessPath": "no-slash"},
        {"volumes": [{"name": "w", "mountPath": "/w", "storageID": "s1"}]},
        {"minReplicas": 0},  # nothing would bring a replica back
        {"autoscaling": {"targetInFlight": 0}},
    ):
        answer = await platform.post_as_tenant(account, "/v1/inference-services", {**base, **wrong})
        assert_problem(answer, 422)
    created = await platform.post_as_tenant(
        account, "/v1/inference-services", {**base, "serviceID": "svc"}
    )
    assert created.status_code == 201, created.text
    headers = bearer(account.admin_key)
    assert_problem(
        await platform.http.patch(
            "/v1/inference-services/svc", json={"minReplicas": 5}, headers=headers
        ),
        409,
    )
    assert_problem(
        await platform.http.post(
            "/v1/inference-services/svc/rollback", json={"revision": 7}, headers=headers
        ),
        404,
    )
    # A change the patch's own schema takes, that makes an invalid template with what
    # the service has: a 422 naming the rule, never a 500.
    for wrong, says in (
        ({"env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]}, "unique"),
        ({"volumes": [{"name": "m", "mountPath": "/m", "storageID": "ds-1"}]}, "storageID"),
    ):
        answer = await platform.http.patch(
            "/v1/inference-services/svc", json=wrong, headers=headers
        )
        assert says in assert_problem(answer, 422, "validation_failed")["detail"]


async def test_each_replica_is_billed_exactly_from_its_scheduling_to_its_end(
    platform: Platform, kafka: KafkaConnection, make_service: Any
) -> None:
    service: RunningService = await make_service(2)
    headers = bearer(service.account.admin_key)
    # Each replica's billed interval, as the service's own record: a tenant checks
    # its bill against these. Another tenant sees none of them.
    replicas = await platform.http.get(f"{service.path}/replicas", headers=headers)
    assert replicas.status_code == 200, replicas.text
    recorded = {run["replicaID"]: run for run in replicas.json()["items"]}
    assert len(recorded) == 2, recorded
    assert all(run["endedAt"] is None and run["scheduledAt"] for run in recorded.values())
    other = await platform.tenant()
    hidden = await platform.http.get(f"{service.path}/replicas", headers=bearer(other.admin_key))
    assert hidden.status_code == 404, hidden.text
    deleted = await platform.http.delete(service.path, headers=headers)
    assert deleted.status_code == 202, deleted.text

    async def gone() -> bool:
        return (await platform.http.get(service.path, headers=headers)).status_code == 404

    await eventually(gone, timeout=60)
    key = f"{service.account.tenant_id}/{service.service_id}"
    events = await aggregate_events(kafka, INFERENCE_LIFECYCLE.name, key, expect=7)
    assert events[-1]["type"].endswith("inference.service_deleted.v1"), events[-1]
    by_replica: dict[str, list[dict[str, Any]]] = {}
    for event in events[:-1]:
        by_replica.setdefault(event["replica_id"], []).append(event)
    assert len(by_replica) == 2, events
    held_us = 0
    for replica_events in by_replica.values():
        assert [(e["state"], e["sequence"]) for e in replica_events] == [
            ("scheduled", 1), ("running", 2), ("ended", 3),
        ]  # fmt: skip
        assert {e["revision"] for e in replica_events} == {1}
        scheduled = recorded[replica_events[0]["replica_id"]]["scheduledAt"]
        assert _us(scheduled) == _us(replica_events[0]["at"])  # the API's start is the bill's
        held_us += _us(replica_events[-1]["at"]) - _us(replica_events[0]["at"])

    # The deleted service's runs are kept, each with its end, so the bill stays
    # checkable: the tenant reads them still, another tenant does not, and the operator
    # reads them naming the tenant.
    kept = await platform.http.get(f"{service.path}/replicas", headers=headers)
    assert kept.status_code == 200, kept.text
    ended = {run["replicaID"]: run for run in kept.json()["items"]}
    assert set(ended) == set(recorded)
    for replica_id, replica_events in by_replica.items():
        run = ended[replica_id]
        assert run["deleted"] is True
        assert _us(run["scheduledAt"]) == _us(replica_events[0]["at"])
        assert _us(run["endedAt"]) == _us(replica_events[-1]["at"])
        assert (run["specName"], run["gpuCount"]) == (recorded[replica_id]["specName"], 1)
    hidden = await platform.http.get(f"{service.path}/replicas", headers=bearer(other.admin_key))
    assert hidden.status_code == 404, hidden.text
    as_operator = await platform.http.get(
        f"{service.path}/replicas", params={"tenantID": service.account.tenant_id},
        headers=platform.admin,
    )  # fmt: skip
    assert [run["replicaID"] for run in as_operator.json()["items"]] == list(ended)
    assert_problem(await platform.http.get(f"{service.path}/replicas", headers=platform.admin), 422)

    async def billed() -> dict[str, Any] | None:
        usage = await platform.http.get(
            f"/v1/usage/inference-services/{service.service_id}", headers=headers
        )
        if usage.status_code != 200 or usage.json()["total"]["gpuMicroseconds"] != held_us:
            return None
        report: dict[str, Any] = usage.json()
        return report

    report = await eventually(billed, timeout=30)
    assert [row["key"] for row in report["rows"]] == [service.service_id]
    grouped = await platform.http.get("/v1/usage", params={"groupBy": "service"}, headers=headers)
    assert {row["key"]: row["gpuMicroseconds"] for row in grouped.json()["rows"]} == {
        service.service_id: held_us
    }


def _us(at: str) -> int:
    return ledger.to_us(datetime.fromisoformat(at.replace("Z", "+00:00")))


async def test_autoscaling_follows_requests_in_flight_up_and_back_down(
    platform: Platform, make_service: Any
) -> None:
    service: RunningService = await make_service(
        1, maxReplicas=3, autoscaling={"targetInFlight": 1, "scaleDownDelaySeconds": 3}
    )
    stop = asyncio.Event()
    served: Counter[str] = Counter()

    async def busy() -> None:
        while not stop.is_set():
            answer = await platform.http.get("/slow", headers=service.headers)
            assert answer.status_code == 200, answer.text
            served[answer.json()["replica"]] += 1

    workers = [asyncio.create_task(busy()) for _ in range(3)]
    try:
        # Three requests always in flight, one per replica wanted: three replicas.
        scaled = await eventually(
            lambda: _service_state(platform, service, state="ready", ready=3), timeout=60
        )
        assert scaled["desiredReplicas"] == 3
        await eventually(lambda: _all_serving(service, 3), timeout=20)
        await asyncio.sleep(3 * SLOW_S)
    finally:
        stop.set()
        await asyncio.gather(*workers)
    assert len(served) >= 2, served  # the new replicas took requests
    # Idle: back to minReplicas once the scale-down delay has passed.
    back = await eventually(
        lambda: _service_state(platform, service, state="ready", ready=1), timeout=60
    )
    assert back["desiredReplicas"] == 1


async def test_a_service_scaled_to_zero_answers_its_next_request(
    platform: Platform, make_service: Any
) -> None:
    service: RunningService = await make_service(
        1, minReplicas=0, maxReplicas=2,
        autoscaling={"targetInFlight": 4, "scaleDownDelaySeconds": 0, "scaleToZeroAfterSeconds": 3},
    )  # fmt: skip

    async def idle() -> dict[str, Any] | None:
        got = await platform.http.get(service.path, headers=bearer(service.account.admin_key))
        body: dict[str, Any] = got.json()
        return body if body["state"] == "idle" and not body["replicas"] else None

    asleep = await eventually(idle, timeout=60)
    assert (asleep["desiredReplicas"], asleep["readyReplicas"]) == (0, 0)
    # The first request waits, within the gateway's bound, while a replica starts.
    answer = await platform.http.get("/", headers=service.headers, timeout=60)
    assert answer.status_code == 200, answer.text
    woke = await eventually(
        lambda: _service_state(platform, service, state="ready", ready=1), timeout=30
    )
    assert woke["desiredReplicas"] == 1


async def test_a_machine_key_of_one_service_calls_it_and_nothing_else(
    platform: Platform, make_service: Any
) -> None:
    service: RunningService = await make_service(1)
    admin = bearer(service.account.admin_key)
    made = await platform.http.post(
        "/v1/api-keys",
        json={"name": "llm client", "serviceIDs": [service.service_id]},
        headers=admin,
    )
    assert made.status_code == 201, made.text
    assert (made.json()["scopes"], made.json()["serviceIDs"]) == (
        ["instances:connect"], [service.service_id],
    )  # fmt: skip
    machine = bearer(made.json()["secret"])
    answer = await platform.http.get("/", headers={**machine, "Host": service.host})
    assert answer.status_code == 200, answer.text
    # No kubectl credential, nor any other route of the API, forwarded or the gateway's
    # own (review N1): each refused with why.
    for method, path, body in (
        ("POST", "/v1/kubeconfig", {"hours": 1}),
        ("GET", "/v1/whoami", None),
        ("GET", "/v1/storages", None),
        ("POST", "/v1/tokens", {}),
    ):
        refused = await platform.http.request(method, path, json=body, headers=machine)
        problem = assert_problem(refused, 403)
        assert problem["code"] == "machine_key_refused", (path, problem)

    # Another service of the same tenant: refused.
    other_host = service.host.replace(service.service_id, "other-svc", 1)
    assert_problem(await platform.http.get("/", headers={**machine, "Host": other_host}), 403)
    # The API, and instance URLs: nothing.
    assert_problem(await platform.http.get("/v1/gpu-instances", headers=machine), 403)
    assert_problem(await platform.http.get(service.path, headers=machine), 403)
    assert_problem(
        await platform.http.post(
            "/v1/api-keys", json={"name": "wider", "scopes": ["instances:read"]}, headers=machine
        ),
        403,
    )
    # A key of services has the one scope: asking for more is refused.
    assert_problem(
        await platform.http.post(
            "/v1/api-keys",
            json={"name": "x", "serviceIDs": [service.service_id], "scopes": ["instances:read"]},
            headers=admin,
        ),
        422,
    )


async def test_replicas_get_credentials_of_the_services_object_storage_until_it_goes(
    platform: Platform, kube: k8s.ApiClient
) -> None:
    account = await platform.tenant()
    spec = await platform.spec(gpus=1)
    storage = (await platform.storage(account))["storageID"]
    service_id = unique("rag")
    created = await platform.post_as_tenant(
        account, "/v1/inference-services",
        {"serviceID": service_id, "image": "registry.test/rag:1", "specName": spec, "port": 8000,
         "storageIDs": [storage]},
    )  # fmt: skip
    assert created.status_code == 201, created.text
    assert created.json()["storageIDs"] == [storage]
    namespace = tenant_namespace(account.tenant_id)
    secret_name = storage_secret_name(storage, service_workload_id(service_id))
    apps, core = k8s.AppsV1Api(kube), k8s.CoreV1Api(kube)

    async def deployed() -> Any:
        found = await apps.list_namespaced_deployment(namespace)
        return found.items[0] if found.items else None

    deployment = await eventually(deployed, timeout=30)
    [container] = deployment.spec.template.spec.containers
    assert secret_name in {source.secret_ref.name for source in container.env_from}
    secret = await core.read_namespaced_secret(secret_name, namespace)
    assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} <= set(secret.data)

    deleted = await platform.http.delete(
        f"/v1/inference-services/{service_id}", headers=bearer(account.admin_key)
    )
    assert deleted.status_code == 202, deleted.text

    async def revoked() -> bool:
        try:
            await core.read_namespaced_secret(secret_name, namespace)
        except k8s.ApiException as error:
            return error.status == 404
        return False

    await eventually(revoked, timeout=60)  # the storage service took them back
