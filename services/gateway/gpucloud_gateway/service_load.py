"""Requests in flight per inference service, as this gateway replica sees them, reported
to the instances service, whose autoscaler sizes each service from them.

What is reported is the time-weighted mean of the requests in flight (proxied, or
waiting for a serving replica) over the last report interval, or the number in
flight at the moment of the report when that is higher: a burst of short
requests counts for the time it lasted, and a request waiting alone counts as one. Each report is signed
as the service's tenant, so a report can only ever concern that tenant's services.
A request that finds no serving replica is reported at once: it is how a service
scaled to zero learns that it is wanted.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from gpucloud_libs.identity import IdentitySigner

from .forwarding import identity_headers
from .schemas import Principal
from .settings import GatewaySettings
from .upstream import Upstream, UpstreamUnreachable

log = logging.getLogger(__name__)

#: The path on the instances service (not public: the gateway's alone).
LOAD_PATH = "/inference-services/load"
#: The subject of the gateway's own reports.
SUBJECT = "service:gateway"

ServiceKey = tuple[str, str]  # (tenant, service)


@dataclass
class _Window:
    in_flight: int = 0
    #: Sum of in-flight requests times the seconds they were in flight, this window.
    area: float = 0.0
    since: float = 0.0

    def move(self, clock: float, change: int) -> None:
        self.area += self.in_flight * (clock - self.since)
        self.since = clock
        self.in_flight += change


class ServiceLoad:
    def __init__(
        self, settings: GatewaySettings, upstream: Upstream, signer: IdentitySigner
    ) -> None:
        self._url = settings.instances_url
        self._upstream = upstream
        self._signer = signer
        self._replica = f"{socket.gethostname()}-{os.getpid()}"
        self._windows: dict[ServiceKey, _Window] = {}
        self._window_started = time.monotonic()
        self._lock = asyncio.Lock()
        self._soon: asyncio.Task[None] | None = None

    @contextmanager
    def track(self, tenant_id: str, service_id: str) -> Iterator[None]:
        """Count one request to the service as in flight until its response has ended."""
        key = (tenant_id, service_id)
        window = self._windows.get(key)
        if window is None:
            window = self._windows[key] = _Window(since=time.monotonic())
        window.move(time.monotonic(), +1)
        try:
            yield
        finally:
            window.move(time.monotonic(), -1)

    def in_flight(self, tenant_id: str, service_id: str) -> int:
        window = self._windows.get((tenant_id, service_id))
        return window.in_flight if window else 0

    def report_soon(self) -> None:
        """Report now rather than at the next round (a request waits for a replica)."""
        if self._soon is None or self._soon.done():
            self._soon = asyncio.get_running_loop().create_task(self.report())

    async def report(self) -> None:
        """The mean load of every service since the last report; idle ones once more
        (as 0), so the autoscaler sees them go quiet, then no longer."""
        async with self._lock:
            clock = time.monotonic()
            span = max(clock - self._window_started, 1e-3)
            self._window_started = clock
            loads: dict[str, dict[str, float]] = defaultdict(dict)
            for key, window in list(self._windows.items()):
                window.move(clock, 0)
                # The mean, unless more are in flight right now (a burst, or the first
                # request to a service at zero): an autoscaler errs towards serving.
                loads[key[0]][key[1]] = max(round(window.area / span, 3), window.in_flight)
                window.area = 0.0
                if window.in_flight == 0 and loads[key[0]][key[1]] == 0:
                    del self._windows[key]  # reported idle: not again until it is busy
            for tenant_id, services in loads.items():
                await self._send(tenant_id, services)

    async def _send(self, tenant_id: str, services: dict[str, float]) -> None:
        principal = Principal(
            subject=SUBJECT, user_id=None, key_id=None, role="tenant-admin",
            tenant_id=tenant_id, scopes=[], via="api_key",
        )  # fmt: skip
        body = {
            "gateway": self._replica,
            "services": [{"serviceID": sid, "inFlight": load} for sid, load in services.items()],
        }
        content = json.dumps(body).encode()
        headers = identity_headers(
            self._signer, principal, service="instances", method="POST", path=LOAD_PATH,
            body=content,
        )  # fmt: skip
        try:
            answer = await self._upstream.call(
                "POST", f"{self._url}{LOAD_PATH}",
                headers=[*headers, ("Content-Type", "application/json")],
                body=content,
            )  # fmt: skip
        except UpstreamUnreachable as error:
            log.warning("service load not reported", extra={"error": str(error)})
            return
        if answer.status >= 400:
            log.warning("service load refused", extra={"status": answer.status})
