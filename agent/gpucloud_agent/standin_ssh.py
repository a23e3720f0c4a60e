"""The simulated node's stand-in for an instance's SSH server (standin.py serves HTTP).

The ssh-devbox template runs sshd on port 2222 with the tenant's key from PUBLIC_KEY.
On a simulated node nothing runs in the pod, so `gpucloud ssh` would reach nothing;
here a real SSH server (asyncssh) answers at the pod's loopback address instead. It
lets in only the key the pod's PUBLIC_KEY holds, as the image's sshd does, and says
plainly that it is a stand-in: a command is received and echoed, not run.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import asyncssh

from gpucloud_libs.kube import Manifest
from gpucloud_libs.naming import INSTANCE_LABEL

log = logging.getLogger(__name__)

#: Ports a stand-in answers with SSH rather than a page: sshd's, and ssh-devbox's.
SSH_PORTS = frozenset({22, 2222})
#: The environment variable ssh-devbox takes the tenant's public key in.
PUBLIC_KEY_VARIABLE = "PUBLIC_KEY"

Address = tuple[str, int]
#: The pod an address serves now (its key may change with the pod).
PodOf = Callable[[], Manifest | None]


def public_key(pod: Manifest) -> str | None:
    """The key the pod's first container takes in PUBLIC_KEY; None without one."""
    container = (pod.get("spec", {}).get("containers") or [{}])[0]
    for variable in container.get("env") or []:
        if variable.get("name") == PUBLIC_KEY_VARIABLE:
            return str(variable.get("value") or "").strip() or None
    return None


def notice(pod: Manifest) -> str:
    """What a session is told first: what this is, and what would run on a real node."""
    metadata = pod.get("metadata", {})
    container = (pod.get("spec", {}).get("containers") or [{}])[0]
    instance = metadata.get("labels", {}).get(INSTANCE_LABEL, "")
    return (
        f"gpucloud local stack: instance {instance} ({container.get('image', '')}) runs on a "
        "simulated node (kwok), where nothing runs inside the pod. This SSH server stands in "
        "for the image's sshd: your key was checked as it would be, but commands are not run.\r\n"
    )


class _KeyOnly(asyncssh.SSHServer):
    """Public-key login with the pod's PUBLIC_KEY, for any user; nothing else."""

    def __init__(self, pod_of: PodOf) -> None:
        self._pod_of = pod_of
        self._connection: asyncssh.SSHServerConnection | None = None

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self._connection = conn

    def begin_auth(self, username: str) -> bool:
        pod = self._pod_of()
        key = public_key(pod) if pod is not None else None
        if key is not None and self._connection is not None:
            try:
                self._connection.set_authorized_keys(asyncssh.import_authorized_keys(key))
            except (asyncssh.KeyImportError, ValueError):
                log.info("the pod's PUBLIC_KEY is not a key; no login possible")
        return True  # authentication is required; with no key it cannot succeed

    def public_key_auth_supported(self) -> bool:
        return True

    def password_auth_supported(self) -> bool:
        return False


def _session(pod_of: PodOf) -> Callable[[asyncssh.SSHServerProcess[str]], Awaitable[None]]:
    async def run(process: asyncssh.SSHServerProcess[str]) -> None:
        pod = pod_of() or {}
        process.stdout.write(notice(pod))
        if process.command is not None:
            process.stdout.write(f"(stand-in) not run: {process.command}\r\n")
            process.exit(0)
            return
        process.stdout.write("Type exit to leave.\r\n$ ")
        try:
            async for line in process.stdin:
                if line.strip() in {"exit", "logout"}:
                    break
                if line.strip():
                    process.stdout.write(f"(stand-in) not run: {line.strip()}\r\n")
                process.stdout.write("$ ")
        except (asyncssh.BreakReceived, asyncssh.TerminalSizeChanged):
            pass
        process.exit(0)

    return run


async def serve(address: Address, pod_of: PodOf) -> Callable[[], Awaitable[None]]:
    """Start an SSH stand-in at `address`; returns how to stop it. Raises OSError when
    the address cannot be bound."""
    server = await asyncssh.create_server(
        lambda: _KeyOnly(pod_of), address[0], address[1],
        server_host_keys=[asyncssh.generate_private_key("ssh-ed25519")],
        process_factory=_session(pod_of),
    )  # fmt: skip

    async def stop() -> None:
        server.close()
        await server.wait_closed()

    return stop
