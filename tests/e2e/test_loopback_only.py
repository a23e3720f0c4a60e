"""The local stack dials loopback alone: every pod of its cluster has a 127.x address,
and an address outside loopback is refused before a socket is made, whether it
comes from a pod the platform proxies to, a tunnel, or a configured endpoint."""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from kubernetes_asyncio import client as k8s
from pydantic import ValidationError

from gpucloud_gateway.upstream import Upstream
from gpucloud_libs.egress import EgressPolicy, EgressRefused
from gpucloud_libs.errors import ValidationFailed
from gpucloud_libs.naming import tenant_namespace
from gpucloud_libs.outbound_guard import OutboundGuard
from gpucloud_libs.settings import ServiceSettings

from .platform import Platform, assert_problem, bearer
from .support import eventually, loopback_gpu_nodes, loopback_server

LOOPBACK = ipaddress.IPv4Network("127.0.0.0/8")
#: TEST-NET-1 (RFC 5737): documentation addresses, routed nowhere.
OUTSIDE_CIDR = "192.0.2.0/24"


@pytest.fixture
async def connects() -> AsyncIterator[list[Any]]:
    """Every address the event loop is asked to connect a socket to: where a SYN
    would leave. aiohttp's connections all go through `loop.sock_connect`."""
    loop = asyncio.get_running_loop()
    seen: list[Any] = []
    real = loop.sock_connect

    async def recorded(sock: Any, address: Any) -> None:
        seen.append(address)
        await real(sock, address)

    loop.sock_connect = recorded  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        loop.sock_connect = real  # type: ignore[method-assign]


async def test_the_local_stack_runs_loopback_only(stack_env: dict[str, str]) -> None:
    assert stack_env["GPUCLOUD_LOOPBACK_ONLY"] == "true"


async def test_every_pod_of_the_local_cluster_has_a_loopback_address(
    kube: k8s.ApiClient,
) -> None:
    core = k8s.CoreV1Api(kube)
    nodes = (await core.list_node()).items
    fleet = [node for node in nodes if (node.metadata.labels or {}).get("gpucloud.io/node-pool")]
    assert fleet, "the local fleet has no nodes"
    for node in fleet:
        assert node.spec.pod_cidr, node.metadata.name
        cidr = ipaddress.IPv4Network(node.spec.pod_cidr)
        assert cidr.subnet_of(LOOPBACK), node.spec.pod_cidr
    pods = (await core.list_pod_for_all_namespaces()).items
    addressed = [pod for pod in pods if pod.status.pod_ip]
    outside = [
        (pod.metadata.namespace, pod.metadata.name, pod.status.pod_ip)
        for pod in addressed
        if ipaddress.ip_address(pod.status.pod_ip) not in LOOPBACK
    ]
    assert outside == []


async def test_a_forced_upstream_outside_loopback_is_refused_before_any_connect(
    connects: list[Any],
) -> None:
    async def here(_: web.Request) -> web.Response:
        return web.Response(text="here")

    app = web.Application()
    app.router.add_get("/", here)
    upstream = Upstream(
        connect_timeout_s=5, read_timeout_s=5, egress=EgressPolicy(loopback_only=True)
    )
    try:
        async with loopback_server(app) as port:
            # The same client reaches loopback...
            answer = await upstream.call("GET", f"http://127.0.0.1:{port}/", headers=[])
            assert (answer.status, answer.body) == (200, b"here")
            assert connects == [("127.0.0.1", port)]
            # ...and never dials outside it, by address or by a name that resolves there.
            for url in ("http://192.0.2.7:80/", "http://10.244.0.5:8888/"):
                with pytest.raises(EgressRefused, match="outside loopback"):
                    await upstream.call("GET", url, headers=[])
            with pytest.raises(EgressRefused, match="outside loopback"):
                async with upstream.stream("GET", "http://192.0.2.7:80/", headers=[], body=None):
                    pass
            assert connects == [("127.0.0.1", port)]
    finally:
        await upstream.close()


async def test_a_webhook_outside_loopback_is_refused_on_the_local_stack() -> None:
    guard = OutboundGuard(field="webhookURL", allow_private_networks=True, loopback_only=True)
    await guard.check("http://127.0.0.1:9/hook")
    with pytest.raises(ValidationFailed, match="outside loopback"):
        await guard.check("http://192.0.2.7/hook")
    session = guard.session(5)
    try:
        with pytest.raises(aiohttp.ClientConnectorError, match="outside loopback"):
            await session.post("http://192.0.2.7/hook", data=b"{}")
    finally:
        await session.close()


def test_a_service_configured_to_dial_outside_loopback_does_not_start() -> None:
    with pytest.raises(ValidationError, match=r"kafka_bootstrap.*outside loopback"):
        ServiceSettings(loopback_only=True, kafka_bootstrap="127.0.0.1:9092,kafka.example:9092")
    with pytest.raises(ValidationError, match="mongodb_uri"):
        ServiceSettings(loopback_only=True, mongodb_uri="mongodb://10.0.0.3:27017/")
    assert ServiceSettings(loopback_only=True, otlp_endpoint="http://localhost:4318").loopback_only
    # Production dials where it is told.
    assert not ServiceSettings(
        loopback_only=False, kafka_bootstrap="kafka.example:9092"
    ).loopback_only


@pytest.fixture
async def outside_instance(
    platform: Platform, kube: k8s.ApiClient
) -> AsyncIterator[tuple[str, str, str, dict[str, str]]]:
    """A running instance on a node whose pods get addresses outside loopback, as a
    misconfigured cluster would give them: (instance id, its URL host, its pod
    address, its owner's headers)."""
    async with loopback_gpu_nodes(kube, 1, pod_cidr=OUTSIDE_CIDR) as (product, _):
        account = await platform.tenant()
        spec = await platform.spec(gpu_type=product)
        body = {"image": "jupyter", "specName": spec,
                "template": {"ports": [{"port": 8888, "isPublic": True}, {"port": 2222}]}}  # fmt: skip
        started = await platform.start_instance(account, body)
        assert started.status_code == 202, started.text
        instance_id = started.json()["instanceID"]
        owner = bearer(account.admin_key)

        async def running() -> dict[str, Any] | None:
            got = (
                await platform.http.get(f"/v1/gpu-instances/{instance_id}", headers=owner)
            ).json()
            return got if got["state"] == "running" else None

        instance = await eventually(running, timeout=60)
        pod = await k8s.CoreV1Api(kube).read_namespaced_pod(
            f"inst-{instance_id}", tenant_namespace(account.tenant_id)
        )
        assert ipaddress.ip_address(pod.status.pod_ip) in ipaddress.ip_network(OUTSIDE_CIDR)
        host = instance["urls"][0].split("://", 1)[1].split("/")[0]
        try:
            yield instance_id, host, pod.status.pod_ip, owner
        finally:
            await platform.http.delete(f"/v1/gpu-instances/{instance_id}", headers=owner)


async def test_the_gateway_refuses_an_instance_outside_loopback(
    platform: Platform, outside_instance: tuple[str, str, str, dict[str, str]]
) -> None:
    instance_id, host, address, owner = outside_instance
    refused = await platform.http.get("/", headers={**owner, "Host": host})
    body = assert_problem(refused, 502, "egress_refused")
    assert address in body["detail"]
    assert "outside loopback" in body["detail"]

    gateway = str(platform.http.base_url).rstrip("/").replace("http://", "ws://")
    tunnel = f"{gateway}/v1/gpu-instances/{instance_id}/ports/2222/tunnel"
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.WSServerHandshakeError) as denied:
            await session.ws_connect(tunnel, headers=owner)
    assert denied.value.status == 502
