"""Facts from events: lifecycle transitions, storage samples and node health changes.

Facts are insert-only, keyed so that a replayed event is a duplicate key and
never a second count (see store.py).
"""

from __future__ import annotations

import logging

from gpucloud_libs.clock import now
from gpucloud_libs.events import GpuHoldingTransition, NodeHealthChanged, StorageUsageSampled

from . import ledger
from .changes import UsageChanges
from .documents import TransitionDoc
from .mirror import recorded_minute
from .store import FactStore

log = logging.getLogger(__name__)


class FactRecorder:
    def __init__(self, facts: FactStore, changes: UsageChanges) -> None:
        self._facts = facts
        self._changes = changes

    @staticmethod
    def transition_document(event_id: str, data: GpuHoldingTransition) -> TransitionDoc:
        """An instance's transition, a job run's or a replica's: runs and replicas are
        billed as instances are, under their workload ids."""
        workload = data.workload_id
        recorded = now()
        return {
            "_id": f"{data.tenant_id}/{workload}#{data.sequence}",
            "event_id": event_id,
            "tenant_id": data.tenant_id,
            "instance_id": workload,
            "job_id": data.of_job,
            "service_id": data.of_service,
            "sequence": data.sequence,
            "state": data.state,
            "at_us": ledger.to_us(data.at),
            "spec_name": data.spec_name,
            "gpu_type": data.gpu_type,
            "gpu_count": data.gpu_count,
            "gpu_resource": data.gpu_resource,
            "gpu_weight": data.gpu_weight,
            "zone": data.zone,
            "node": data.node,
            "cluster": data.cluster,
            "region": data.region,
            "user_id": data.user_id,
            "project": data.project,
            "recorded_us": ledger.to_us(recorded),
            "recorded_minute": recorded_minute(recorded),
        }

    async def transitions(self, events: list[tuple[str, GpuHoldingTransition]]) -> None:
        """Record lifecycle transitions (event id, data); a repeat is a no-op."""
        documents = [self.transition_document(event_id, data) for event_id, data in events]
        self._changes.instances.add(*((data.tenant_id, data.workload_id) for _, data in events))
        for repeat, kept in await self._facts.record_transitions(documents):
            if (kept["state"], kept["at_us"]) != (repeat["state"], repeat["at_us"]):
                # Same instance and sequence, a different fact: the first one stays billed.
                log.error(
                    "conflicting transition ignored",
                    extra={"transition": repeat["_id"], "kept_event": kept.get("event_id"),
                           "ignored_event": repeat["event_id"]},
                )  # fmt: skip

    async def sample(self, data: StorageUsageSampled) -> None:
        at_us = ledger.to_us(data.at)
        key = (data.tenant_id, data.storage_id)
        if at_us - at_us % ledger.US_PER_HOUR > self._changes.storage_hours_done.get(key, -1):
            self._changes.storages.add(key)  # it may close an hour
        await self._facts.record_sample(
            {
                # Storage ids are unique per tenant, like instance ids.
                "_id": f"{data.tenant_id}/{data.storage_id}@{at_us}",
                "tenant_id": data.tenant_id,
                "storage_id": data.storage_id,
                "kind": data.kind,
                "bytes_used": data.bytes_used,
                "at_us": at_us,
                "recorded_minute": recorded_minute(now()),
            }
        )

    async def health(self, data: NodeHealthChanged) -> None:
        """A node's health change: the quarantines in them are credited, not billed."""
        at_us = ledger.to_us(data.at)
        await self._facts.record_health(
            {"_id": f"{data.node}@{at_us}:{data.health}", "node": data.node,
             "health": data.health, "at_us": at_us}
        )  # fmt: skip
