"""How the agent seals what it publishes with its node's key (gpucloud_libs.node_seals).

- On a real node, the key comes from the monitoring service, for the ServiceAccount
  token Kubernetes projects into this pod (audience `gpucloud-monitoring`, bound to
  the pod and so to its node). It is asked for at the first report, and at each
  report until it comes: nothing unsealed is published (monitoring would refuse it).
- The simulator stands in for the agents of many simulated nodes and holds the
  telemetry secret itself, from which it derives each node's key.
"""

from __future__ import annotations

import base64
import logging
import time
from pathlib import Path
from typing import Protocol

import httpx

from gpucloud_libs.node_seals import NodeKeyring, ReportT, seal

log = logging.getLogger("gpucloud.agent")

#: How long the agent waits before asking for its key again after a refusal.
RETRY_S = 10.0
#: Where the chart projects the agent's token for the monitoring service.
TOKEN_PATH = "/var/run/secrets/gpucloud/monitoring/token"  # noqa: S105 (a path)


class KeyUnavailable(Exception):
    """This node's key could not be had now; the report waits for the next round."""


class Sealer(Protocol):
    async def __call__(self, report: ReportT) -> ReportT: ...


class SecretSealer:
    """Seals each simulated node's reports with that node's key."""

    def __init__(self, telemetry_secret: str) -> None:
        self._keys = NodeKeyring(telemetry_secret)

    async def __call__(self, report: ReportT) -> ReportT:
        return seal(self._keys.of(report.node), report)


class FetchedKeySealer:
    """Seals this node's reports with the key monitoring gives for this pod's token."""

    def __init__(self, node: str, monitoring_url: str, token_path: str = TOKEN_PATH) -> None:
        self._node = node
        self._url = monitoring_url.rstrip("/") + "/node-keys"
        self._token_path = Path(token_path)
        self._key: bytes | None = None
        self._next_try = 0.0  # time.monotonic()

    async def __call__(self, report: ReportT) -> ReportT:
        if self._key is None:
            if time.monotonic() < self._next_try:
                raise KeyUnavailable("asking monitoring for the node key again shortly")
            try:
                self._key = await self.fetch()
            except KeyUnavailable:
                # A node a second would otherwise ask (and monitoring review a token)
                # on every report while monitoring is away.
                self._next_try = time.monotonic() + RETRY_S
                raise
        return seal(self._key, report)

    async def fetch(self) -> bytes:
        try:
            # Read each time: the kubelet rotates the projected token.
            token = self._token_path.read_text().strip()
        except OSError as error:
            raise KeyUnavailable(
                f"no ServiceAccount token at {self._token_path}: {error}"
            ) from error
        try:
            async with httpx.AsyncClient(timeout=10.0) as http:
                response = await http.post(self._url, headers={"Authorization": f"Bearer {token}"})
        except httpx.HTTPError as error:
            raise KeyUnavailable(f"{self._url} is unreachable: {error}") from error
        if response.status_code != 200:
            detail = response.text[:300]
            raise KeyUnavailable(f"{self._url} refused the key ({response.status_code}): {detail}")
        try:
            body = response.json()
            node, key = body["node"], base64.urlsafe_b64decode(body["key"])
        except (ValueError, KeyError, TypeError) as error:
            raise KeyUnavailable(f"{self._url} answered without a node key: {error}") from error
        if node != self._node:
            # The token's pod is on another node than NODE_NAME says: publish nothing.
            raise KeyUnavailable(f"the token is bound to node {node!r}, not {self._node!r}")
        log.info("node key received", extra={"node": self._node})
        return key
