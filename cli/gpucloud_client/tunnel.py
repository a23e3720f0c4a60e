"""A TCP tunnel to one port of an instance, over the gateway's authenticated WebSocket
(`/v1/gpu-instances/{id}/ports/{port}/tunnel`): what `gpucloud ssh` uses as its SSH
ProxyCommand, so the instance needs no port open to the world."""

from __future__ import annotations

import json
import os
import threading
from urllib.parse import quote

from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from .errors import ApiError, Unreachable

#: Bytes read from the local side per message.
CHUNK_BYTES = 64 * 1024


def open_tunnel(endpoint: str, credential: str, instance_id: str, port: int) -> ClientConnection:
    """The open WebSocket; an ApiError with the gateway's problem if it refuses."""
    base = endpoint.rstrip("/").replace("https://", "wss://", 1).replace("http://", "ws://", 1)
    url = f"{base}/v1/gpu-instances/{quote(instance_id, safe='')}/ports/{port}/tunnel"
    try:
        return connect(
            url,
            additional_headers={"Authorization": f"Bearer {credential}"},
            user_agent_header="gpucloud-cli/0.1",
            open_timeout=30,
            max_size=None,
            compression=None,  # SSH is encrypted: nothing to gain
        )
    except InvalidStatus as refused:
        response = refused.response
        try:
            body = json.loads(response.body or b"{}")
        except ValueError:
            body = {"detail": (response.body or b"").decode(errors="replace")[:500]}
        raise ApiError(response.status_code, body if isinstance(body, dict) else {}) from refused
    except (OSError, TimeoutError) as error:
        raise Unreachable(f"cannot reach the API at {endpoint}: {error}") from error


def relay(connection: ClientConnection, read_fd: int = 0, write_fd: int = 1) -> None:
    """Copy bytes between the local pair of file descriptors (stdin and stdout for a
    ProxyCommand) and the tunnel until either side ends."""

    def local_to_tunnel() -> None:
        try:
            while chunk := os.read(read_fd, CHUNK_BYTES):
                connection.send(chunk)
        except (OSError, ConnectionClosed):
            pass
        finally:
            connection.close()

    sender = threading.Thread(target=local_to_tunnel, daemon=True)
    sender.start()
    try:
        for message in connection:
            data = message.encode() if isinstance(message, str) else message
            view = memoryview(data)
            while view:
                view = view[os.write(write_fd, view) :]
    except (OSError, ConnectionClosed):
        pass
