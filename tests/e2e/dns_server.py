"""A DNS server on loopback whose answers a test changes: the attacker's resolver in
a DNS-rebinding test. It answers A queries for the names it holds, and NXDOMAIN
(or an empty answer, for other types) otherwise."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections.abc import AsyncIterator
from typing import cast

_TYPE_A, _CLASS_IN = 1, 1


class _Answers(asyncio.DatagramProtocol):
    def __init__(self, records: dict[str, str]) -> None:
        self.records = records
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str | bytes, int]) -> None:
        (query_id,) = struct.unpack(">H", data[:2])
        offset, labels = 12, []
        while data[offset]:
            length = data[offset]
            labels.append(data[offset + 1 : offset + 1 + length].decode().lower())
            offset += 1 + length
        (query_type,) = struct.unpack(">H", data[offset + 1 : offset + 3])
        question = data[12 : offset + 5]
        name = ".".join(labels)
        address = self.records.get(name)
        answer = b""
        if address is not None and query_type == _TYPE_A:
            # A pointer to the question's name, type A, class IN, TTL 0: never cached.
            answer = b"\xc0\x0c" + struct.pack(">HHIH", _TYPE_A, _CLASS_IN, 0, 4)
            answer += socket.inet_aton(address)
        flags = 0x8180 | (0 if name in self.records else 3)  # a response; NXDOMAIN if unknown
        header = struct.pack(">HHHHHH", query_id, flags, 1, 1 if answer else 0, 0, 0)
        assert self.transport is not None
        self.transport.sendto(header + question + answer, addr)


@contextlib.asynccontextmanager
async def dns_server(records: dict[str, str]) -> AsyncIterator[str]:
    """Serve `records` (name -> IPv4, changed in place by the test); yields `ip:port`."""
    loop = asyncio.get_running_loop()
    transport, _ = await loop.create_datagram_endpoint(
        lambda: _Answers(records), local_addr=("127.0.0.1", 0)
    )
    try:
        yield f"127.0.0.1:{transport.get_extra_info('sockname')[1]}"
    finally:
        transport.close()
