"""HTTP and WebSocket to what sits behind the gateway: the services and instance workloads.

The one module that imports aiohttp. aiohttp's client pool was measured
against httpx's under concurrency (`python -m bench gateway`) and chosen for
the proxy. Bodies pass through byte for byte: no decompression, no re-encoding.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
from starlette.types import Receive, Scope, Send
from yarl import URL

from gpucloud_libs.egress import EgressPolicy, EgressRefused, OutsideLoopback

#: Connection-level headers (RFC 9110 §7.6.1) are never forwarded.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)

Headers = list[tuple[str, str]]

#: How long an idle pooled connection is kept: well below the services' keep-alive
#: (`runtime.KEEP_ALIVE_S`), so the gateway never reuses one a service is closing.
IDLE_CONNECTION_S = 4.0


class UpstreamUnreachable(Exception):
    """The upstream did not accept the connection or did not answer in time."""


class UpstreamRefused(UpstreamUnreachable):
    """No connection was made: nothing of the request was sent, so another replica
    may take it."""


@dataclass
class UpstreamResponse:
    status: int
    headers: Headers
    body: bytes


@dataclass
class UpstreamStream:
    status: int
    headers: Headers
    chunks: AsyncIterator[bytes]


class UpstreamSocket:
    """One WebSocket to an upstream, as text and binary frames."""

    def __init__(self, socket: aiohttp.ClientWebSocketResponse) -> None:
        self._socket = socket
        self.protocol = socket.protocol

    async def send(self, data: str | bytes) -> None:
        if isinstance(data, str):
            await self._socket.send_str(data)
        else:
            await self._socket.send_bytes(data)

    async def frames(self) -> AsyncIterator[str | bytes]:
        async for message in self._socket:
            if message.type in {aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY}:
                yield message.data
            elif message.type == aiohttp.WSMsgType.ERROR:
                return

    @property
    def close_code(self) -> int | None:
        return self._socket.close_code

    async def close(self, code: int = 1000) -> None:
        await self._socket.close(code=code)


def forwardable(headers: Iterable[tuple[str, str]], drop: frozenset[str] = frozenset()) -> Headers:
    return [
        (name, value)
        for name, value in headers
        if name.lower() not in HOP_BY_HOP and name.lower() not in drop
    ]


def _refused_by_policy(error: Exception) -> EgressRefused | None:
    """The egress policy's refusal inside aiohttp's connection error, as our own error."""
    if isinstance(error, aiohttp.ClientConnectorError) and isinstance(
        error.os_error, OutsideLoopback
    ):
        return EgressRefused(f"{error.host}:{error.port}: {error.os_error.strerror}")
    return None


class Upstream:
    def __init__(
        self,
        *,
        connect_timeout_s: float,
        read_timeout_s: float,
        egress: EgressPolicy,
        max_connections: int = 512,
    ) -> None:
        self._timeout = aiohttp.ClientTimeout(
            total=None, connect=connect_timeout_s, sock_read=read_timeout_s
        )
        self._max_connections = max_connections
        self._egress = egress
        self._session: aiohttp.ClientSession | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(
                    limit=self._max_connections,
                    limit_per_host=0,
                    # Under uvicorn's 5 s: an idle connection is dropped here before
                    # the service closes it, so a POST is never sent on one the
                    # service is closing (a 503 for a request that was fine).
                    keepalive_timeout=IDLE_CONNECTION_S,
                    # Every connection is checked as it is made (egress.py).
                    socket_factory=self._egress.socket_factory(),
                ),
                timeout=self._timeout,
                auto_decompress=False,
                cookie_jar=aiohttp.DummyCookieJar(),
                skip_auto_headers=("User-Agent", "Accept-Encoding", "Content-Type"),
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def call(
        self, method: str, url: str | URL, *, headers: Headers, body: bytes = b""
    ) -> UpstreamResponse:
        """A whole request and a whole response: the API path, whose bodies are small."""
        try:
            async with self.session.request(
                method, url, headers=headers, data=body or None, allow_redirects=False
            ) as response:
                return UpstreamResponse(
                    response.status,
                    forwardable(response.headers.items()),
                    await response.read(),
                )
        except (aiohttp.ClientConnectionError, TimeoutError) as error:
            raise _refused_by_policy(error) or UpstreamUnreachable(
                f"{type(error).__name__}: {error}"
            ) from error

    async def get_json(self, url: str, *, headers: Headers) -> Any:
        try:
            async with self.session.get(url, headers=headers) as response:
                response.raise_for_status()
                return await response.json()
        except (aiohttp.ClientError, TimeoutError) as error:
            raise UpstreamUnreachable(f"{type(error).__name__}: {error}") from error

    @asynccontextmanager
    async def stream(
        self, method: str, url: str | URL, *, headers: Headers, body: AsyncIterator[bytes] | None
    ) -> AsyncIterator[UpstreamStream]:
        """Request and response both streamed: the instance-URL path (uploads, SSE, downloads)."""
        try:
            response = await self.session.request(
                method, url, headers=headers, data=body, allow_redirects=False
            )
        except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as error:
            raise _refused_by_policy(error) or UpstreamRefused(
                f"{type(error).__name__}: {error}"
            ) from error
        except (aiohttp.ClientConnectionError, TimeoutError) as error:
            raise UpstreamUnreachable(f"{type(error).__name__}: {error}") from error

        async def chunks() -> AsyncIterator[bytes]:
            try:
                async for chunk in response.content.iter_any():
                    yield chunk
            except (aiohttp.ClientError, TimeoutError):
                return  # the upstream went away mid-body: end the body here

        try:
            yield UpstreamStream(response.status, forwardable(response.headers.items()), chunks())
        finally:
            response.release()

    @asynccontextmanager
    async def websocket(
        self, url: str, *, headers: Headers, protocols: list[str], max_message_bytes: int
    ) -> AsyncIterator[UpstreamSocket]:
        try:
            socket = await self.session.ws_connect(
                url,
                headers=headers,
                protocols=protocols,
                max_msg_size=max_message_bytes,
                heartbeat=30,
            )
        except (aiohttp.ClientError, TimeoutError) as error:
            raise _refused_by_policy(error) or UpstreamUnreachable(
                f"{type(error).__name__}: {error}"
            ) from error
        try:
            yield UpstreamSocket(socket)
        finally:
            await socket.close()


class StreamedResponse:
    """The upstream's status, headers and body, streamed as they arrive."""

    def __init__(self, status: int, headers: Headers, chunks: AsyncIterator[bytes]) -> None:
        self.status_code = status
        self.raw_headers = [(name.lower().encode(), value.encode()) for name, value in headers]
        self._chunks = chunks

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        async for chunk in self._chunks:
            if chunk:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
