"""An open connection whose caller cannot be checked (an outage) is not a refused one:
it stays for a grace period, then closes asking the client to reconnect."""

from __future__ import annotations

import asyncio

from gpucloud_gateway.long_connections import LongConnections
from gpucloud_gateway.settings import GatewaySettings
from gpucloud_libs.errors import DependencyUnavailable, Unauthenticated

from .test_long_connections import ClosedSocket


def _connections(grace_s: float) -> LongConnections:
    connections = LongConnections(GatewaySettings(long_connection_recheck_s=0.02))
    connections._unchecked_grace_s = grace_s  # the 30 s of the product, shortened
    return connections


async def _busy(_: object) -> None:
    await asyncio.sleep(10)


async def test_an_outage_keeps_the_connection_for_the_grace_then_closes_it() -> None:
    checks = 0

    async def unreachable() -> None:
        nonlocal checks
        checks += 1
        raise DependencyUnavailable("the instances service did not answer")

    socket = ClosedSocket()
    started = asyncio.get_running_loop().time()
    await asyncio.wait_for(_connections(0.3).hold(socket, _busy, unreachable), 3)
    assert asyncio.get_running_loop().time() - started >= 0.3
    assert checks > 3  # kept checking through the grace
    assert socket.closed == (1011, "the caller could not be checked again; reconnect")


async def test_a_check_that_never_answers_counts_as_an_outage() -> None:
    async def hangs() -> None:
        await asyncio.sleep(10)

    socket = ClosedSocket()
    await asyncio.wait_for(_connections(0.2).hold(socket, _busy, hangs), 3)
    assert socket.closed is not None
    assert socket.closed[0] == 1011


async def test_a_refusal_during_an_outage_still_closes_at_once() -> None:
    answers = [DependencyUnavailable("down"), Unauthenticated("the API key has been revoked")]

    async def then_revoked() -> None:
        raise answers.pop(0)

    socket = ClosedSocket()
    await asyncio.wait_for(_connections(60).hold(socket, _busy, then_revoked), 3)
    assert socket.closed == (1008, "the API key has been revoked")
