"""The bounds of a long connection that the suite cannot wait for on the real stack (an
hour idle, a day open), with the limits shortened."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gpucloud_gateway.long_connections import Activity, LongConnections
from gpucloud_gateway.settings import GatewaySettings
from gpucloud_libs.errors import RateLimited


class ClosedSocket:
    """What `hold` says to the client: the close code and reason."""

    def __init__(self) -> None:
        self.closed: tuple[int, str | None] | None = None

    async def close(self, code: int = 1000, reason: str | None = None) -> None:
        self.closed = (code, reason)


def _connections(**limits: Any) -> LongConnections:
    return LongConnections(GatewaySettings(long_connection_recheck_s=0.02, **limits))


async def _allowed() -> None:
    return None


async def test_an_idle_connection_is_closed_and_a_busy_one_is_not() -> None:
    connections = _connections(long_connection_idle_s=0.2)

    async def silent(_: Activity) -> None:
        await asyncio.sleep(10)

    socket = ClosedSocket()
    await asyncio.wait_for(connections.hold(socket, silent, _allowed), 2)
    assert socket.closed == (1001, "idle for 0.2 s")

    async def chatty(activity: Activity) -> None:
        for _ in range(20):  # 0.4 s in all, never 0.2 s quiet
            activity.touch()
            await asyncio.sleep(0.02)

    socket = ClosedSocket()
    await connections.hold(socket, chatty, _allowed)
    assert socket.closed is None  # it ended by itself


async def test_a_connection_is_closed_at_its_maximum_lifetime_however_busy() -> None:
    connections = _connections(long_connection_max_s=0.2)

    async def chatty(activity: Activity) -> None:
        while True:
            activity.touch()
            await asyncio.sleep(0.01)

    socket = ClosedSocket()
    await asyncio.wait_for(connections.hold(socket, chatty, _allowed), 2)
    assert socket.closed == (1001, "open for 0.2 s, the most allowed")


async def test_a_tenants_slots_are_counted_and_given_back() -> None:
    connections = _connections(long_connections_per_tenant=2)
    with connections.slot("t1"), connections.slot("t1"):
        with pytest.raises(RateLimited), connections.slot("t1"):
            pass
        with connections.slot("t2"):  # another tenant's are its own
            assert connections.open_count("t2") == 1
    assert connections.open_count("t1") == 0
    with connections.slot("t1"):
        assert connections.open_count("t1") == 1
