"""Every app refuses a body over its limit (1 MiB) with a 413 problem, before reading it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from urllib.parse import urlparse

import httpx
import pytest

from .platform import assert_problem

SERVICES = ["GATEWAY", "INSTANCES", "STORAGE", "METERING", "MONITORING"]
#: A route of each app that takes a JSON body (the gateway's own, and one forwarded).
ROUTES = {
    "GATEWAY": "/v1/tokens",
    "INSTANCES": "/gpu-instances",
    "STORAGE": "/storages",
    "METERING": "/prices",
    "MONITORING": "/alert-rules",
}
TWO_MIB = 2 * 2**20


async def _declared_only(url: str, path: str) -> tuple[int, dict[str, object]]:
    """Send headers that announce 2 MiB and no body at all: an app that waited for the
    body would never answer, so an answer proves it refused without reading."""
    parsed = urlparse(url)
    reader, writer = await asyncio.open_connection(parsed.hostname, parsed.port)
    try:
        writer.write(
            f"POST {path} HTTP/1.1\r\nHost: {parsed.netloc}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {TWO_MIB}\r\n\r\n".encode()
        )
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10)
        status = int(head.split(b" ", 2)[1])
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        body = json.loads(await asyncio.wait_for(reader.readexactly(length), timeout=10))
        return status, body
    finally:
        writer.close()


@pytest.mark.parametrize("service", SERVICES)
async def test_an_announced_2_mib_body_is_refused_before_it_is_sent(
    stack_env: dict[str, str], service: str
) -> None:
    status, body = await _declared_only(stack_env[f"GPUCLOUD_{service}_URL"], ROUTES[service])
    assert status == 413
    assert body["code"] == "payload_too_large"
    assert body["max_bytes"] == 2**20


async def _chunks(total: int) -> AsyncIterator[bytes]:
    sent = 0
    while sent < total:
        yield b" " * 65536
        sent += 65536


@pytest.mark.parametrize("service", SERVICES)
async def test_a_streamed_body_is_cut_off_at_the_limit(
    stack_env: dict[str, str], service: str
) -> None:
    async with httpx.AsyncClient(base_url=stack_env[f"GPUCLOUD_{service}_URL"]) as http:
        response = await http.post(
            ROUTES[service],
            content=_chunks(TWO_MIB),  # chunked: no Content-Length to refuse up front
            headers={"content-type": "application/json"},
        )
    assert_problem(response, 413, "payload_too_large")


async def test_a_body_under_the_limit_still_reaches_the_route(stack_env: dict[str, str]) -> None:
    async with httpx.AsyncClient(base_url=stack_env["GPUCLOUD_GATEWAY_URL"]) as http:
        response = await http.post(
            "/v1/tokens",
            content=b"{" + b" " * 500_000 + b"}",
            headers={"content-type": "application/json"},
        )
    # Read and validated: the token request names no credential.
    assert_problem(response, 401)
