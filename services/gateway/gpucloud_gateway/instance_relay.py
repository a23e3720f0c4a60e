"""What the URL proxy and the tunnels send on to a workload: the caller's headers
without the gateway's credentials, WebSocket frames both ways, and a refused
handshake in words."""

from __future__ import annotations

import asyncio
import contextlib
import re

from fastapi import Response
from starlette.websockets import WebSocket, WebSocketDisconnect

from .instance_cookies import without_session_cookie
from .long_connections import Activity, both_ways
from .upstream import Headers, UpstreamSocket, forwardable

#: A Host header a workload may be told it was reached at: a host name, and digits
#: for a port; anything else is replaced by the bare host the gateway matched.
_HOST_AND_PORT = re.compile(r"[a-z0-9.-]+(:[0-9]{1,5})?")
#: What only the gateway says about the request: the caller's own are dropped, so a
#: workload that reads the first value sees the gateway's, not the caller's claim.
_FORWARDING = frozenset(
    {"forwarded", "x-forwarded-for", "x-forwarded-host", "x-forwarded-proto", "x-real-ip"}
)
#: Headers of the caller's WebSocket handshake that the upstream handshake makes anew.
WS_HANDSHAKE = frozenset(
    {
        "sec-websocket-key",
        "sec-websocket-version",
        "sec-websocket-extensions",
        "sec-websocket-protocol",
    }
)


def upstream_headers(
    request_headers: list[tuple[str, str]],
    host: str,
    client: str,
    *,
    cookie_name: str,
    scheme: str,
    drop: frozenset[str] = frozenset(),
) -> Headers:
    """The caller's headers minus the gateway's credentials (its key, its cookie
    `cookie_name`) and minus any forwarding headers of its own, plus the gateway's
    X-Forwarded-*: `client` is the caller's address as the trusted proxies tell it.
    X-Forwarded-Host is the Host as the caller sent it, port and all: a workload that
    writes its own absolute links (Jupyter's redirects) must name the port."""
    headers: Headers = []
    forwarded_host = host
    for name, value in request_headers:
        lower = name.lower()
        if lower == "host" and _HOST_AND_PORT.fullmatch(value.strip().lower()):
            forwarded_host = value.strip().lower()
        if lower in drop or lower in _FORWARDING:
            continue
        if lower == "authorization" and value.partition(" ")[2].startswith(("gpc_", "gpt_")):
            continue  # ours, not the workload's
        if lower == "cookie":
            others = without_session_cookie(value, cookie_name)
            if others:
                headers.append((name, others))
            continue
        headers.append((name, value))
    headers = forwardable(headers)
    headers += [
        ("X-Forwarded-Host", forwarded_host),
        ("X-Forwarded-Proto", scheme),
        ("X-Forwarded-For", client),
    ]
    return headers


async def pump(socket: WebSocket, upstream: UpstreamSocket, activity: Activity) -> None:
    """Frames both ways until either side closes; the upstream's close code goes on."""

    async def client_to_upstream() -> None:
        with contextlib.suppress(WebSocketDisconnect):
            while True:
                message = await socket.receive()
                if message["type"] == "websocket.disconnect":
                    return
                data = (
                    message.get("text") if message.get("text") is not None else message.get("bytes")
                )
                if data is not None:
                    activity.touch()
                    await upstream.send(data)

    async def upstream_to_client() -> None:
        async for frame in upstream.frames():
            activity.touch()
            if isinstance(frame, str):
                await socket.send_text(frame)
            else:
                await socket.send_bytes(frame)

    from_upstream = asyncio.ensure_future(upstream_to_client())
    done = await both_ways(client_to_upstream(), from_upstream, quiet=(WebSocketDisconnect,))
    for task in done:
        task.result()
    if from_upstream in done:
        with contextlib.suppress(RuntimeError):
            await socket.close(code=upstream.close_code or 1000)


async def deny_handshake(socket: WebSocket, response: Response) -> None:
    """Refuse the handshake with an HTTP problem where the server can, else close 1008."""
    try:
        await socket.send_denial_response(response)
    except RuntimeError:
        await socket.close(code=1008)
