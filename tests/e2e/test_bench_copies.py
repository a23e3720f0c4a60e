"""The benchmarks that time a copy of a service start that copy with the settings they
give it over the stack's. A setting a service comes to require then breaks this test,
not, silently, the next benchmark run (the monitoring benchmark once stopped at start
for want of the webhook sealing key)."""

from __future__ import annotations

import socket
import subprocess
import uuid
from collections.abc import Callable

import httpx
import pytest
from pymongo import AsyncMongoClient

from bench import metering_throughput, monitoring_ingest
from bench.common import service_log, start_service

from .support import eventually


@pytest.mark.parametrize(
    ("service", "copy_settings"),
    [
        ("monitoring", monitoring_ingest.copy_settings),
        ("metering", metering_throughput.copy_settings),
    ],
)
async def test_each_benchmarks_copy_of_a_service_starts_and_serves(
    service: str, copy_settings: Callable[[], dict[str, str]], stack_env: dict[str, str]
) -> None:
    name = f"{service}guard{uuid.uuid4().hex[:8]}"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = await start_service(
        service, stack_env, name=name, port=port, settings=copy_settings()
    )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:

            async def serving() -> bool:
                assert process.poll() is None, service_log(service).read_text()[-2000:]
                try:
                    return (await http.get("/healthz")).status_code == 200
                except httpx.TransportError:
                    return False

            await eventually(serving, timeout=60, interval=0.5)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
        mongo: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(
            stack_env["GPUCLOUD_MONGODB_URI"]
        )
        await mongo.drop_database(f"gpucloud_{name}")
        await mongo.close()
