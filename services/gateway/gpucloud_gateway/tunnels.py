"""TCP tunnels to an instance's ports over an authenticated WebSocket: how `gpucloud ssh`
reaches the SSH server inside an instance that opens no port to the world.

- `WS /v1/gpu-instances/{id}/ports/{port}/tunnel`, with `Authorization: Bearer <API key
  or token>`. No cookie is read, so no web page can open a shell on a user's behalf.
- The caller needs `instances:connect` in the owning tenant, and the tenant must not be
  suspended; the port must be one the instance declares (public or not).
- Bytes pass both ways unchanged, as binary messages. Either side closing ends both.
- Each opening is in the audit log (`CONNECT …/tunnel`, 101), and so is each refusal.
- The caller is checked again every few seconds while it is open, and a tenant's open
  tunnels, their idle time and their lifetime are bounded (long_connections.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from urllib.parse import quote

from fastapi import WebSocket
from starlette.websockets import WebSocketDisconnect

from gpucloud_libs.errors import GpucloudError, NotFound, Unauthenticated
from gpucloud_libs.http import problem_response

from .audit import AuditedCall, AuditLog
from .authentication import Authenticator
from .authorization import Authorizer
from .instance_relay import deny_handshake
from .instance_targets import (
    InstanceTargets,
    InstanceUnreachable,
    RelayedProblem,
    no_longer_served,
)
from .long_connections import Activity, LongConnections, both_ways
from .routes import TENANT_MEMBERS
from .schemas import Principal

#: How long the instance's port has to accept the TCP connection.
CONNECT_TIMEOUT_S = 5.0
#: Bytes read from the instance per message.
CHUNK_BYTES = 64 * 1024


class InstanceTunnels:
    def __init__(
        self,
        authenticator: Authenticator,
        authorizer: Authorizer,
        targets: InstanceTargets,
        audit: AuditLog,
        connections: LongConnections,
    ) -> None:
        self._authenticator = authenticator
        self._authorizer = authorizer
        self._targets = targets
        self._audit = audit
        self._connections = connections

    async def serve(self, socket: WebSocket, instance_id: str, port: int) -> None:
        principal: Principal | None = None
        with contextlib.ExitStack() as held:
            try:
                principal = await self._caller(socket)
                await self._authorizer.authorize(  # a new tunnel spends a rate-limit token
                    principal, roles=TENANT_MEMBERS, scope="instances:connect", method="CONNECT"
                )
                assert principal.tenant_id is not None  # _caller refuses the operator
                held.enter_context(self._connections.slot(principal.tenant_id))
                address = await self._targets.address(principal, instance_id, port, tunnel=True)
                try:
                    reader, writer = await asyncio.wait_for(
                        asyncio.open_connection(address, port), CONNECT_TIMEOUT_S
                    )
                except (OSError, TimeoutError) as error:
                    raise InstanceUnreachable(
                        f"the instance's port {port} did not accept the connection; "
                        "is the server inside listening?",
                        retry_after_s=2,
                    ) from error
            except GpucloudError as error:
                await self._record(principal, socket, error.status)
                await deny_handshake(socket, problem_response(error, socket))
                return
            except RelayedProblem as problem:
                await self._record(principal, socket, problem.response.status_code)
                await deny_handshake(socket, problem.response)
                return

            async def still_allowed() -> None:
                """As at the handshake: the caller, its rights, the instance's address."""
                again = await self._caller(socket)
                await self._allowed(again)
                try:
                    now_at = await self._targets.address(again, instance_id, port, tunnel=True)
                except RelayedProblem as problem:
                    raise no_longer_served(problem, port) from problem
                if now_at != address:
                    raise NotFound("the instance behind this tunnel was replaced")

            await self._record(principal, socket, 101)
            await socket.accept()
            try:
                await self._connections.hold(
                    socket, lambda activity: _pump(socket, reader, writer, activity), still_allowed
                )
            finally:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()

    async def _allowed(self, principal: Principal) -> None:
        await self._authorizer.permit(
            principal, roles=TENANT_MEMBERS, scope="instances:connect", method="CONNECT"
        )

    async def _caller(self, socket: WebSocket) -> Principal:
        scheme, _, credential = socket.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not credential:
            raise Unauthenticated("a tunnel needs `Authorization: Bearer <API key or token>`")
        principal = await self._authenticator.authenticate(credential)
        if principal.tenant_id is None or principal.service_ids is not None:
            # The operator has no instances; a machine key reaches its services alone.
            raise NotFound("no instance of yours answers here")
        return principal

    async def _record(self, principal: Principal | None, socket: WebSocket, status: int) -> None:
        if principal is None:
            return
        path = socket.url.path
        template = "/v1/gpu-instances/{instance_id}/ports/{port}/tunnel"
        call = AuditedCall(principal, principal.tenant_id, f"CONNECT {template}", quote(path))
        await self._audit.record(call, status)


async def _pump(
    socket: WebSocket,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    activity: Activity,
) -> None:
    async def client_to_instance() -> None:
        with contextlib.suppress(WebSocketDisconnect):
            while True:
                message = await socket.receive()
                if message["type"] == "websocket.disconnect":
                    return
                data = message.get("bytes")
                if data is None and message.get("text") is not None:
                    data = message["text"].encode()
                if data:
                    activity.touch()
                    writer.write(data)
                    await writer.drain()

    async def instance_to_client() -> None:
        while chunk := await reader.read(CHUNK_BYTES):
            activity.touch()
            await socket.send_bytes(chunk)

    from_instance = asyncio.ensure_future(instance_to_client())
    done = await both_ways(
        client_to_instance(), from_instance, quiet=(OSError, WebSocketDisconnect)
    )
    for task in done:
        with contextlib.suppress(OSError, WebSocketDisconnect):
            task.result()
    if from_instance in done:  # the instance closed: say so to the client
        with contextlib.suppress(RuntimeError):
            await socket.close(code=1000)
