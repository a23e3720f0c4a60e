"""The `gpucloud` command as people run it, for the tests that walk a journey through it:
the installed console script, run as a subprocess against the real stack, with its own
config file."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .platform import MIB, Platform, TenantAccount

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
