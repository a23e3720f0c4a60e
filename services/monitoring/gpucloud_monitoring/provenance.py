"""Which telemetry the consumer takes (review M4): every GPU node's agent writes to the
topic with the same Kafka principal, so what that principal cannot prove is checked
here, before anything is counted:

- a batch or inventory is sealed by the node it names (node_keys.py),
- from a node the cluster has (known_nodes.py, off only for the ingest benchmark),
- and an operator's release or quarantine carries the monitoring service's own seal
  (fleet_requests.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from gpucloud_libs.events import NodeHealthRequest, NodeInventory, TelemetryBatch

from .fleet_requests import FleetRequestSeal
from .known_nodes import KnownNodes
from .node_keys import NodeSeals

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Reports:
    batches: list[TelemetryBatch]
    inventories: list[NodeInventory]
    requests: list[NodeHealthRequest]


class Provenance:
    def __init__(
        self, node_seals: NodeSeals, requests_seal: FleetRequestSeal, nodes: KnownNodes | None
    ) -> None:
        self._node_seals = node_seals
        self._requests_seal = requests_seal
        self._nodes = nodes

    async def taken(self, reports: Reports) -> Reports:
        """The reports whose origin holds; the others are dropped, and said."""
        batches = self._node_seals.genuine(reports.batches)
        inventories = self._node_seals.genuine(reports.inventories)
        if self._nodes is not None:
            batches = [batch for batch in batches if await self._nodes.known(batch.node)]
            inventories = [item for item in inventories if await self._nodes.known(item.node)]
        return Reports(batches, inventories, [r for r in reports.requests if self._sealed(r)])

    def _sealed(self, request: NodeHealthRequest) -> bool:
        if self._requests_seal.genuine(request):
            return True
        log.warning(
            "refused a node health request without the monitoring service's seal",
            extra={"node": request.node, "requested_by": request.requested_by},
        )
        return False
