"""Instance URLs end to end: a kwok node whose pods get loopback addresses, a real
little HTTP and WebSocket server standing in for the workload, and the gateway
in between, over HTTP, streaming and WebSocket, by header and by cookie."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from kubernetes_asyncio import client as k8s

from gpucloud_gateway.settings import GatewaySettings
from gpucloud_libs.naming import tenant_namespace

from .platform import Platform, TenantAccount, assert_problem, bearer
from .support import eventually, loopback_gpu_nodes, url_host, url_path

#: Secure, host-only and Path=/: no other instance host can set or shadow it.
COOKIE = "__Host-gpucloud_session"


async def _workload(address: str, port: int) -> web.AppRunner:
    """What a tenant would run: echo, upload, a streamed download and a WebSocket."""

    async def echo(request: web.Request) -> web.Response:
        return web.json_response(
            {"path": request.path, "query": request.query_string, "headers": dict(request.headers)}
        )

    async def upload(request: web.Request) -> web.Response:
        size = 0
        async for chunk in request.content.iter_any():
            size += len(chunk)
        return web.json_response({"bytes": size})

    async def download(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        for index in range(5):
            await response.write(f"chunk {index}\n".encode())
        await response.write_eof()
        return response

    async def cookies(request: web.Request) -> web.Response:
        """A workload that tries to set cookies for the whole domain, and the gateway's."""
        response = web.Response(text="set")
        response.headers.add("Set-Cookie", "theme=dark; Path=/")
        response.headers.add("Set-Cookie", "everywhere=1; Domain=instances.gpucloud.local; Path=/")
        response.headers.add("Set-Cookie", f"{COOKIE}=fixed; Path=/; Secure")
        response.headers.add("Set-Cookie", "gpucloud_session=fixed; Path=/")
        return response

    async def socket(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(protocols=["jupyter"])
        await ws.prepare(request)
        async for message in ws:
            if message.type == aiohttp.WSMsgType.TEXT and message.data == "bye":
                await ws.close(code=4001)
            elif message.type == aiohttp.WSMsgType.TEXT:
                await ws.send_str(f"echo {message.data}")
            elif message.type == aiohttp.WSMsgType.BINARY:
                await ws.send_bytes(message.data[::-1])
        return ws

    app = web.Application(client_max_size=64 * 2**20)
    app.add_routes(
        [web.get("/echo", echo), web.post("/upload", upload), web.get("/download", download),
         web.get("/ws", socket), web.get("/cookies", cookies), web.post("/echo", echo)]
    )  # fmt: skip
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, address, port).start()
    return runner


@dataclass
class RunningInstance:
    account: TenantAccount
    instance_id: str
    port: int
    host: str
    #: The origin of the instance's own pages: its URL's scheme, host and port.
    origin: str


@pytest.fixture
async def loopback_node(kube: k8s.ApiClient) -> AsyncIterator[str]:
    """A kwok GPU node whose pods get 127.x.y.z addresses: (product)."""
    async with loopback_gpu_nodes(kube, 1) as (product, _):
        yield product


@pytest.fixture
async def running(
    platform: Platform, kube: k8s.ApiClient, loopback_node: str
) -> AsyncIterator[RunningInstance]:
    """A running instance with a public port, and the workload serving on its pod address."""
    account = await platform.tenant()
    spec = await platform.spec(gpu_type=loopback_node)
    port = random.randint(20_000, 40_000)
    started = await platform.start_instance(
        account,
        {"image": "jupyter", "specName": spec, "template": {"ports": [{"port": port,
         "isPublic": True}, {"port": port + 1, "isPublic": True}]}},
    )  # fmt: skip
    assert started.status_code == 202, started.text
    instance_id = started.json()["instanceID"]

    async def is_running() -> dict[str, Any] | None:
        got = await platform.http.get(
            f"/v1/gpu-instances/{instance_id}", headers=bearer(account.admin_key)
        )
        return got.json() if got.json()["state"] == "running" else None

    instance = await eventually(is_running, timeout=60)
    pod = await k8s.CoreV1Api(kube).read_namespaced_pod(
        f"inst-{instance_id}", tenant_namespace(account.tenant_id)
    )
    assert pod.status.pod_ip.startswith("127.")
    runner = await _workload(pod.status.pod_ip, port)
    host = url_host(instance["urls"][0])
    scheme, _, rest = instance["urls"][0].partition("://")
    origin = f"{scheme}://{rest.split('/', 1)[0]}"
    try:
        yield RunningInstance(account, instance_id, port, host, origin)
    finally:
        await runner.cleanup()
        await platform.http.delete(
            f"/v1/gpu-instances/{instance_id}", headers=bearer(account.admin_key)
        )


async def session_cookie(platform: Platform, running: RunningInstance) -> str:
    """`<name>=<value>` of the cookie the owner's session link sets."""
    link = await platform.http.post(
        f"/v1/gpu-instances/{running.instance_id}/ports/{running.port}/session",
        headers=bearer(running.account.admin_key),
    )
    opened = await platform.http.get(url_path(link.json()["url"]), headers={"Host": running.host})
    cookie: str = opened.headers["set-cookie"].split(";")[0]
    return cookie


async def test_owner_reaches_the_instance_and_nobody_else_does(
    platform: Platform, running: RunningInstance
) -> None:
    owner = {**bearer(running.account.admin_key), "Host": running.host}
    answer = await platform.http.get("/echo?x=1", headers={**owner, "Cookie": "_xsrf=abc"})
    assert answer.status_code == 200, answer.text
    seen = answer.json()
    assert seen["query"] == "x=1"
    headers = {name.lower(): value for name, value in seen["headers"].items()}
    assert "authorization" not in headers  # the gateway's credential stays at the gateway
    assert headers["cookie"] == "_xsrf=abc"
    assert headers["x-forwarded-host"] == running.host

    other = await platform.tenant()
    assert_problem(
        await platform.http.get("/echo", headers={**bearer(other.admin_key), "Host": running.host}),
        404,
    )
    assert_problem(
        await platform.http.get("/echo", headers={**platform.admin, "Host": running.host}), 404
    )
    assert_problem(await platform.http.get("/echo", headers={"Host": running.host}), 401)
    _, _, no_connect = await platform.member(running.account, scopes=["instances:read"])
    assert_problem(
        await platform.http.get("/echo", headers={**bearer(no_connect), "Host": running.host}),
        403,
        "insufficient_scope",
    )
    # A host naming the instance under another tenant is not this instance.
    forged = running.host.replace(running.account.tenant_id, other.tenant_id)
    assert_problem(
        await platform.http.get("/echo", headers={**bearer(other.admin_key), "Host": forged}), 404
    )


async def test_session_link_sets_a_cookie_for_that_host_only(
    platform: Platform, running: RunningInstance
) -> None:
    link = await platform.http.post(
        f"/v1/gpu-instances/{running.instance_id}/ports/{running.port}/session",
        headers=bearer(running.account.admin_key),
    )
    assert link.status_code == 200, link.text
    url = link.json()["url"]
    assert url_host(url) == running.host
    path = url_path(url)
    assert path.startswith("/_gpucloud/session?token=")

    other = await platform.tenant()
    assert_problem(
        await platform.http.post(
            f"/v1/gpu-instances/{running.instance_id}/ports/{running.port}/session",
            headers=bearer(other.admin_key),
        ),
        404,
    )

    opened = await platform.http.get(path + "&next=/echo", headers={"Host": running.host})
    assert opened.status_code == 303
    assert opened.headers["location"] == "/echo"
    cookie = opened.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}=")
    attributes = {part.strip().partition("=")[0].lower() for part in cookie.split(";")[1:]}
    assert {"httponly", "secure", "path"} <= attributes
    assert "domain" not in attributes  # host-only
    session = cookie.split(";")[0].removeprefix(f"{COOKIE}=")

    with_cookie = {"Host": running.host, "Cookie": f"{COOKIE}={session}; _xsrf=abc"}
    answer = await platform.http.get("/echo", headers=with_cookie)
    assert answer.status_code == 200, answer.text
    forwarded = {k.lower(): v for k, v in answer.json()["headers"].items()}
    assert forwarded["cookie"] == "_xsrf=abc"  # the session cookie is the gateway's

    # The cookie opens neither the instance's other port nor the API.
    other_port = running.host.replace(f"--{running.port}--", f"--{running.port + 1}--")
    assert_problem(
        await platform.http.get("/echo", headers={**with_cookie, "Host": other_port}), 401
    )
    assert_problem(await platform.http.get("/v1/whoami", headers=bearer(session)), 401)
    # Good once: the link sits in URLs, so in proxies' logs (review L9).
    reused = await platform.http.get(path + "&next=/echo", headers={"Host": running.host})
    assert "already opened" in assert_problem(reused, 401)["detail"]
    # An open redirect is not on offer.
    fresh = await platform.http.post(
        f"/v1/gpu-instances/{running.instance_id}/ports/{running.port}/session",
        headers=bearer(running.account.admin_key),
    )
    again = await platform.http.get(
        url_path(fresh.json()["url"]) + "&next=//evil.test/", headers={"Host": running.host}
    )
    assert again.headers["location"] == "/"

    # Only a one-minute link opens a session: not the cookie itself (which would renew
    # forever), not an API key, and a link token is no cookie.
    host = {"Host": running.host}
    for token in (session, running.account.admin_key):
        renewed = await platform.http.get(f"/_gpucloud/session?token={token}", headers=host)
        assert_problem(renewed, 401)
    link_token = path.partition("token=")[2]
    as_cookie = await platform.http.get(
        "/echo", headers={**host, "Cookie": f"{COOKIE}={link_token}"}
    )
    assert_problem(as_cookie, 401)


async def test_a_cookie_cannot_be_ridden_from_another_site(
    platform: Platform, running: RunningInstance
) -> None:
    with_cookie = {"Host": running.host, "Cookie": await session_cookie(platform, running)}
    own_pages = [{"Origin": running.origin}, {"Sec-Fetch-Site": "same-origin"}, {}]
    for headers in own_pages:
        answer = await platform.http.post("/echo", headers={**with_cookie, **headers})
        assert answer.status_code == 200, (headers, answer.text)
    scheme, _, authority = running.origin.partition("://")
    other_scheme = f"{'https' if scheme == 'http' else 'http'}://{authority}"
    elsewhere = [
        {"Origin": "https://evil.test"},
        # The same host by another scheme or port is another origin (review L12).
        {"Origin": other_scheme},
        {"Origin": f"{running.origin.rsplit(':', 1)[0]}:9999"},
        {"Sec-Fetch-Site": "cross-site", "Origin": running.origin},
        {"Sec-Fetch-Site": "same-site"},  # another tenant's instance is same-site
    ]
    for headers in elsewhere:
        refused = await platform.http.post("/echo", headers={**with_cookie, **headers})
        assert_problem(refused, 403)
    # Reading is not a change; a bearer credential is not ambient, so any origin may send it.
    read = await platform.http.get("/echo", headers={**with_cookie, "Origin": "https://evil.test"})
    assert read.status_code == 200
    keyed = {
        **bearer(running.account.admin_key),
        "Host": running.host,
        "Origin": "https://evil.test",
    }
    assert (await platform.http.post("/echo", headers=keyed)).status_code == 200


async def test_a_workload_cannot_set_cookies_beyond_its_host(
    platform: Platform, running: RunningInstance
) -> None:
    owner = {**bearer(running.account.admin_key), "Host": running.host}
    answer = await platform.http.get("/cookies", headers=owner)
    assert answer.status_code == 200
    assert answer.headers.get_list("set-cookie") == ["theme=dark; Path=/"]


async def test_a_suspended_tenant_reads_its_instance_url_and_changes_nothing_there(
    platform: Platform, running: RunningInstance
) -> None:
    """Suspension holds at the instance URL as at the API: reads pass, a POST is a 403
    (review M8)."""
    owner = {**bearer(running.account.admin_key), "Host": running.host}
    suspended = await platform.http.patch(
        f"/v1/tenants/{running.account.tenant_id}", json={"status": "suspended"},
        headers=platform.admin,
    )  # fmt: skip
    assert suspended.status_code == 200, suspended.text
    try:

        async def refused() -> bool:
            posted = await platform.http.post("/upload", content=b"x", headers=owner)
            return posted.status_code == 403

        await eventually(refused, timeout=10)  # tenants are cached a few seconds
        posted = await platform.http.post("/upload", content=b"x", headers=owner)
        assert_problem(posted, 403, "tenant_suspended")
        assert (await platform.http.get("/echo", headers=owner)).status_code == 200
    finally:
        await platform.http.patch(
            f"/v1/tenants/{running.account.tenant_id}", json={"status": "active"},
            headers=platform.admin,
        )  # fmt: skip


async def test_bodies_stream_both_ways(platform: Platform, running: RunningInstance) -> None:
    owner = {**bearer(running.account.admin_key), "Host": running.host}

    async def body() -> AsyncIterator[bytes]:
        for _ in range(32):
            yield b"x" * 2**20

    uploaded = await platform.http.post("/upload", content=body(), headers=owner)
    assert uploaded.status_code == 200, uploaded.text
    assert uploaded.json() == {"bytes": 32 * 2**20}

    async with platform.http.stream("GET", "/download", headers=owner) as download:
        assert download.status_code == 200
        text = b"".join([chunk async for chunk in download.aiter_bytes()]).decode()
    assert text == "".join(f"chunk {index}\n" for index in range(5))


async def test_websocket_by_header_and_by_cookie(
    platform: Platform, running: RunningInstance, stack_env: dict[str, str]
) -> None:
    url = stack_env["GPUCLOUD_GATEWAY_URL"] + "/ws"
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(
            url,
            headers={**bearer(running.account.admin_key), "Host": running.host},
            protocols=["jupyter"],
        ) as ws:
            assert ws.protocol == "jupyter"
            await ws.send_str("hello")
            assert await ws.receive_str(timeout=10) == "echo hello"
            await ws.send_bytes(b"abc")
            assert await ws.receive_bytes(timeout=10) == b"cba"
            await ws.send_str("bye")
            closing = await ws.receive(timeout=10)
            assert closing.type == aiohttp.WSMsgType.CLOSE
            assert ws.close_code == 4001  # the workload's close code reaches the client

        cookie = await session_cookie(platform, running)
        same_origin = {"Host": running.host, "Cookie": cookie, "Origin": running.origin}
        async with session.ws_connect(url, headers=same_origin) as ws:
            await ws.send_str("via cookie")
            assert await ws.receive_str(timeout=10) == "echo via cookie"

        # A page elsewhere cannot ride the cookie into the instance.
        cross = {**same_origin, "Origin": "https://evil.test"}
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await session.ws_connect(url, headers=cross)
        assert refused.value.status == 401
        other = await platform.tenant()
        with pytest.raises(aiohttp.WSServerHandshakeError) as hidden:
            await session.ws_connect(url, headers={**bearer(other.admin_key), "Host": running.host})
        assert hidden.value.status == 404


async def test_an_instance_not_yet_running_says_so(platform: Platform) -> None:
    account = await platform.tenant(max_gpus=64)
    spec = await platform.spec(gpus=16)  # no node has 16 GPUs: it stays pending
    started = await platform.start_instance(
        account,
        {"image": "jupyter", "specName": spec, "template": {"ports": [{"port": 8888,
         "isPublic": True}, {"port": 9000}]}},
    )  # fmt: skip
    assert started.status_code == 202, started.text
    host = url_host(started.json()["urls"][0])
    owner = {**bearer(account.admin_key), "Host": host}
    waiting = await platform.http.get("/", headers=owner)
    body = assert_problem(waiting, 409, "instance_not_running")
    assert body["state"] == "pending"
    assert waiting.headers["Retry-After"] == "2"
    private = host.replace("--8888--", "--9000--")
    assert_problem(await platform.http.get("/", headers={**owner, "Host": private}), 404)


async def test_an_open_websocket_or_tunnel_ends_when_its_key_is_revoked(
    platform: Platform, running: RunningInstance, stack_env: dict[str, str]
) -> None:
    """A shell outlives its handshake by hours: the caller is checked again while it is
    open, and a revoked key closes both kinds within seconds (review M7)."""
    _, key_id, secret = await platform.member(running.account)
    base = stack_env["GPUCLOUD_GATEWAY_URL"]
    tunnel_path = f"/v1/gpu-instances/{running.instance_id}/ports/{running.port}/tunnel"
    async with aiohttp.ClientSession() as session:
        socket = await session.ws_connect(
            base + "/ws", headers={**bearer(secret), "Host": running.host}, protocols=["jupyter"]
        )
        tunnel = await session.ws_connect(base + tunnel_path, headers=bearer(secret))
        await socket.send_str("still here")
        assert await socket.receive_str(timeout=10) == "echo still here"
        revoked = await platform.http.delete(
            f"/v1/api-keys/{key_id}", headers=bearer(running.account.admin_key)
        )
        assert revoked.status_code in {200, 204}, revoked.text
        for connection in (socket, tunnel):
            closing = await connection.receive(timeout=30)
            assert closing.type == aiohttp.WSMsgType.CLOSE, closing
            assert closing.data == 1008
            assert "revoked" in str(closing.extra)


async def test_a_tenant_holds_a_bounded_number_of_websockets_each_with_bounded_messages(
    running: RunningInstance, stack_env: dict[str, str]
) -> None:
    """Per gateway replica, a tenant's open tunnels and WebSockets are capped (the next is
    a 429 at the handshake), and a message over the size limit closes its socket (1009)."""
    cap = GatewaySettings.model_fields["long_connections_per_tenant"].default
    largest = GatewaySettings.model_fields["websocket_max_message_bytes"].default
    url = stack_env["GPUCLOUD_GATEWAY_URL"] + "/ws"
    owner = {**bearer(running.account.admin_key), "Host": running.host}
    async with aiohttp.ClientSession() as session:
        sockets = [await session.ws_connect(url, headers=owner) for _ in range(cap)]
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await session.ws_connect(url, headers=owner)
        assert refused.value.status == 429
        await sockets.pop().close()

        async def opens_again() -> aiohttp.ClientWebSocketResponse | None:
            try:
                return await session.ws_connect(url, headers=owner)
            except aiohttp.WSServerHandshakeError:
                return None

        sockets.append(await eventually(opens_again, timeout=10))
        await sockets[0].send_bytes(b"x" * (largest + 1))
        closing = await sockets[0].receive(timeout=10)
        assert closing.type == aiohttp.WSMsgType.CLOSE, closing
        assert closing.data == 1009
        for socket in sockets[1:]:
            await socket.close()
