"""Health probes: one small real request per component, stdlib only."""

from __future__ import annotations

import socket
import ssl
import struct
import urllib.error
import urllib.request
from pathlib import Path


def http_ok(
    url: str, *, token: str | None = None, ca: Path | None = None, timeout: float = 2.0
) -> bool:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    context: ssl.SSLContext | None = None
    if url.startswith("https://"):
        context = ssl.create_default_context(cafile=str(ca)) if ca else _unverified()
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            return 200 <= int(response.status) < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _unverified() -> ssl.SSLContext:
    # Only for components whose serving certificate the stack does not issue
    # (the scheduler's and controller-manager's self-signed health endpoints).
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def unix_socket_open(path: Path, timeout: float = 1.0) -> bool:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(str(path))
        except OSError:
            return False
    return True


def kafka_ok(host: str, port: int, timeout: float = 2.0) -> bool:
    """Send an ApiVersions request (key 18, v0) and expect error code 0 back."""
    client_id = b"gpucloud-stack"
    body = struct.pack(">hhih", 18, 0, 1, len(client_id)) + client_id
    try:
        with socket.create_connection((host, port), timeout=timeout) as conn:
            conn.sendall(struct.pack(">i", len(body)) + body)
            header = _read_exactly(conn, 4)
            (size,) = struct.unpack(">i", header)
            response = _read_exactly(conn, size)
    except OSError:
        return False
    correlation_id, error_code = struct.unpack(">ih", response[:6])
    return bool(correlation_id == 1 and error_code == 0)


def mongo_ok(host: str, port: int, timeout: float = 2.0) -> bool:
    """Send `{ping: 1}` as an OP_MSG and expect `ok: 1.0` in the reply."""
    ping = b"\x10ping\x00" + struct.pack("<i", 1)
    database = b"admin\x00"
    db_field = b"\x02$db\x00" + struct.pack("<i", len(database)) + database
    body = ping + db_field
    document = struct.pack("<i", 4 + len(body) + 1) + body + b"\x00"
    payload = struct.pack("<I", 0) + b"\x00" + document  # flagBits, section kind 0
    op_msg = 2013
    header = struct.pack("<iiii", 16 + len(payload), 1, 0, op_msg)
    try:
        with socket.create_connection((host, port), timeout=timeout) as conn:
            conn.sendall(header + payload)
            (length,) = struct.unpack("<i", _read_exactly(conn, 4))
            reply = _read_exactly(conn, length - 4)
    except OSError:
        return False
    marker = reply.find(b"\x01ok\x00")  # `ok` is a double
    if marker < 0:
        return False
    (ok,) = struct.unpack("<d", reply[marker + 4 : marker + 12])
    return bool(ok == 1.0)


def _read_exactly(conn: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = conn.recv(size - len(chunks))
        if not chunk:
            raise ConnectionError("connection closed")
        chunks.extend(chunk)
    return bytes(chunks)
