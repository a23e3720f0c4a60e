"""Each node's seal on its telemetry (review M4).

Every GPU node's agent writes to the telemetry topic with the same Kafka principal, so
the topic alone cannot tell one node from another: a compromised node could report in
another's name (a fake idle GPU fires that tenant's stop rule, a fake XID quarantines a
node). Each node therefore seals what it sends with a key of its own, an HMAC of the
node's name under the telemetry secret, which only the monitoring service holds:

- an agent on a real node gets its key from monitoring (`POST /node-keys`) with the
  projected ServiceAccount token Kubernetes bound to its pod, whose node claim the
  API server vouches for (TokenReview), so it can only ever get its own node's key;
- the GPU simulator, which stands in for the agents of many simulated nodes, holds
  the telemetry secret itself.

Monitoring derives the key of the node a batch names and takes the batch only if the
seal matches.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import TypeVar, cast

from .events import NodeInventory, TelemetryBatch

_LABEL = b"gpucloud/telemetry/node-key/v1"

NodeReport = TelemetryBatch | NodeInventory
ReportT = TypeVar("ReportT", bound=NodeReport)


def node_key(telemetry_secret: str, node: str) -> bytes:
    """The key of `node`'s seals."""
    root = hmac.new(telemetry_secret.encode(), _LABEL, hashlib.sha256).digest()
    return hmac.new(root, node.encode(), hashlib.sha256).digest()


class NodeKeyring:
    """Each node's key under the telemetry secret, derived once per node: what the
    monitoring service checks seals with, and the simulator seals with."""

    def __init__(self, telemetry_secret: str) -> None:
        self._secret = telemetry_secret
        self._keys: dict[str, bytes] = {}

    def of(self, node: str) -> bytes:
        key = self._keys.get(node)
        if key is None:
            key = self._keys[node] = node_key(self._secret, node)
        return key


def seal(key: bytes, report: ReportT) -> ReportT:
    # model_copy returns the report's own type; mypy sees only the union's.
    return cast(ReportT, report.model_copy(update={"mac": _mac(key, report)}))


def genuine(key: bytes, report: NodeReport) -> bool:
    return hmac.compare_digest(report.mac.encode(), _mac(key, report).encode())


def _mac(key: bytes, report: NodeReport) -> str:
    payload = report.model_dump_json(exclude={"mac"}).encode()
    return hmac.new(key, payload, hashlib.sha256).hexdigest()
