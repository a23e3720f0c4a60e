"""Kafka handlers of the storage service: thin, they call the capability that owns the event."""

from __future__ import annotations

from gpucloud_libs.events import (
    CloudEvent,
    InferenceServiceDeleted,
    InstanceStateChanged,
    JobStateChanged,
    TenantDeleted,
    TenantUpserted,
)
from gpucloud_libs.naming import job_workload_id, service_workload_id

from .attachments import Attachments
from .store import storage_key
from .tenancy import Tenancy

#: An instance in one of these holds no storage any more: what it was given is revoked.
RELEASED_IN = frozenset({"stopped", "failed", "deleted"})
#: Likewise for a batch job.
JOB_RELEASED_IN = frozenset({"succeeded", "failed", "cancelled"})


class EventHandlers:
    def __init__(self, tenancy: Tenancy, attachments: Attachments) -> None:
        self.tenancy = tenancy
        self.attachments = attachments

    async def on_tenant(self, event: CloudEvent) -> None:
        if isinstance(event.data, TenantUpserted):
            await self.tenancy.apply(event.data)
        elif isinstance(event.data, TenantDeleted):
            await self.tenancy.delete(event.data.tenant_id)

    async def on_lifecycle(self, events: list[CloudEvent]) -> None:
        """A batch at a time: most instances use no storage, and one lookup per batch
        finds those that did."""
        ended = [
            event.data
            for event in events
            if isinstance(event.data, InstanceStateChanged) and event.data.state in RELEASED_IN
        ]
        await self.attachments.release_ended(
            [(data.tenant_id, data.instance_id) for data in ended],
            ended_at={
                storage_key(data.tenant_id, data.instance_id): data.sequence for data in ended
            },
        )

    async def on_job_lifecycle(self, events: list[CloudEvent]) -> None:
        """A job that ended: its storages' credentials go, as an ended instance's do."""
        ended = [
            (event.data.tenant_id, job_workload_id(event.data.job_id))
            for event in events
            if isinstance(event.data, JobStateChanged) and event.data.state in JOB_RELEASED_IN
        ]
        await self.attachments.release_ended(ended)

    async def on_inference_lifecycle(self, events: list[CloudEvent]) -> None:
        """A deleted inference service: its storages' credentials go (its replicas'
        own transitions concern metering)."""
        ended = [
            (event.data.tenant_id, service_workload_id(event.data.service_id))
            for event in events
            if isinstance(event.data, InferenceServiceDeleted)
        ]
        await self.attachments.release_ended(ended)
