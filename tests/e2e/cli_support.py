"""The `gpucloud` command as people run it, for the tests that walk a journey through it:
the installed console script, run as a subprocess against the real stack, with its own
config file."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncssh
from kubernetes_asyncio import client as k8s

from gpucloud_stack import provision

from .platform import MIB, Platform, TenantAccount
from .support import eventually, loopback_gpu_nodes

GPUCLOUD = Path(sys.executable).parent / "gpucloud"
#: Runs the command with Ctrl-C's default disposition, as at a terminal: a test run
#: started in the background by a shell inherits SIGINT ignored, and so would the CLI.
AS_AT_A_TERMINAL = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execv(sys.argv[1], sys.argv[1:])"
)


@dataclass
class Ran:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


class Cli:
    """The command with one config file (its profiles) and the gateway's address."""

    def __init__(self, home: Path, endpoint: str) -> None:
        home.mkdir(parents=True, exist_ok=True)
        self.home = home
        self.endpoint = endpoint
        self.env = {
            key: value
            for key, value in os.environ.items()
            if key not in {"GPUCLOUD_ENDPOINT", "GPUCLOUD_API_KEY", "GPUCLOUD_PROFILE"}
        }
        self.env["GPUCLOUD_CONFIG"] = str(home / "config.json")

    @property
    def config(self) -> Path:
        return self.home / "config.json"

    async def start(self, *args: str, stdin: str | None = None) -> asyncio.subprocess.Process:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-c", AS_AT_A_TERMINAL, str(GPUCLOUD), *args, env=self.env,
            cwd=self.home,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        if stdin is not None:
            assert process.stdin is not None
            process.stdin.write(stdin.encode())
            await process.stdin.drain()
        return process

    async def run(self, *args: str, stdin: str | None = None, timeout: float = 120) -> Ran:
        process = await self.start(*args, stdin=stdin)
        out, err = await asyncio.wait_for(process.communicate(), timeout)
        assert process.returncode is not None
        return Ran(process.returncode, out.decode(), err.decode())

    async def ok(self, *args: str, stdin: str | None = None, timeout: float = 120) -> Ran:
        ran = await self.run(*args, stdin=stdin, timeout=timeout)
        assert ran.code == 0, (args, ran)
        return ran

    async def login(self, key: str, profile: str = "default") -> Ran:
        return await self.run(
            "login", "--endpoint", self.endpoint, "--api-key-stdin", "--profile", profile,
            stdin=key + "\n",
        )  # fmt: skip


def cli_for(tmp_path: Path, platform: Platform) -> Cli:
    return Cli(tmp_path, str(platform.http.base_url).rstrip("/"))


async def ready_tenant(platform: Platform, account: TenantAccount) -> None:
    """A new tenant reaches the services by event; the CLI retries `tenant_not_ready` for
    30 s on its own, but the tests start from a tenant the services know."""
    await platform.storage(account, size_bytes=MIB)


class _OpenServer(asyncssh.SSHServer):
    """An SSH server that lets anyone in: the tests are of the tunnel, not of SSH's auth."""

    def begin_auth(self, username: str) -> bool:
        return False


async def ssh_through(config: Path, host: str, command: str, env: dict[str, str]) -> Ran:
    """The system's OpenSSH client run with an ssh config (`instances ssh-config`'s block
    and the test's own settings), to `host`."""
    ssh = shutil.which("ssh")
    assert ssh is not None, "the tests need an OpenSSH client"
    process = await asyncio.create_subprocess_exec(
        ssh, "-F", str(config), host, command, env=env, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return Ran(process.returncode, out.decode(), err.decode())


async def _answer(process: asyncssh.SSHServerProcess[str]) -> None:
    process.stdout.write(f"{process.get_extra_info('username')} ran: {process.command}\n")
    process.exit(0)


@contextlib.asynccontextmanager
async def ssh_instance(
    platform: Platform, kube: k8s.ApiClient
) -> AsyncIterator[tuple[TenantAccount, str]]:
    """(account, instance id) of a running ssh-devbox instance on a kwok node whose pods
    get loopback addresses, with a real SSH server (asyncssh) on its port 2222 standing
    in for the image's sshd. It answers each command with `<user> ran: <command>`."""
    async with loopback_gpu_nodes(kube, 1) as (product, _):
        account = await platform.tenant()
        spec = await platform.spec(gpu_type=product)
        body = {"image": "ssh-devbox", "specName": spec, "template": {"ports": [{"port": 2222}]}}
        created = await platform.start_instance(account, body)
        assert created.status_code == 202, created.text
        instance_id = created.json()["instanceID"]

        async def pod_ip() -> str | None:
            pods = await k8s.CoreV1Api(kube).list_pod_for_all_namespaces(
                label_selector=f"gpucloud.io/instance={instance_id}"
            )
            running = [p for p in pods.items if p.status.phase == "Running" and p.status.pod_ip]
            return str(running[0].status.pod_ip) if running else None

        address = await eventually(pod_ip, timeout=60)
        server = await asyncssh.create_server(
            _OpenServer, address, 2222, server_host_keys=[asyncssh.generate_private_key("ssh-ed25519")],
            process_factory=_answer,
        )  # fmt: skip
        try:
            yield account, instance_id
        finally:
            server.close()
            await server.wait_closed()


async def kubectl(kubeconfig: Path, *args: str) -> tuple[int, str]:
    """The real kubectl with `kubeconfig`: its exit code and its output."""
    binary = provision.ensure(provision.KUBECTL, say=False) / "kubectl"
    process = await asyncio.create_subprocess_exec(
        str(binary), "--kubeconfig", str(kubeconfig), "--request-timeout", "20s", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await process.communicate()
    return process.returncode or 0, out.decode()
