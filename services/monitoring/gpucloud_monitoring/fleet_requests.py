"""The operator's node health requests, sealed by the monitoring service (review M4).

A release or quarantine travels on the telemetry topic, keyed by node, so that the
consumer owning the node's health applies it in order with the node's samples. The node
agent writes to that topic too, with a principal every GPU node holds; an unsealed
request could put a quarantined node back in service. Only the monitoring service,
which both writes and reads these requests, holds the key, so an HMAC is enough.

The key is derived from the monitoring service's sealing key (GPUCLOUD_WEBHOOK_SECRETS_KEY)
with a label of its own, so no new secret has to be provisioned and the two uses never
share a key.
"""

from __future__ import annotations

import hashlib
import hmac

from gpucloud_libs.events import NodeHealthRequest

_LABEL = b"gpucloud/monitoring/fleet-requests/v1"


class FleetRequestSeal:
    def __init__(self, sealing_key: str) -> None:
        self._key = hmac.new(sealing_key.encode(), _LABEL, hashlib.sha256).digest()

    def seal(self, request: NodeHealthRequest) -> NodeHealthRequest:
        return request.model_copy(update={"mac": self._mac(request)})

    def genuine(self, request: NodeHealthRequest) -> bool:
        return hmac.compare_digest(request.mac.encode(), self._mac(request).encode())

    def _mac(self, request: NodeHealthRequest) -> str:
        payload = request.model_dump_json(exclude={"mac"}).encode()
        return hmac.new(self._key, payload, hashlib.sha256).hexdigest()
