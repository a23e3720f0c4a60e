"""Which project each workload runs in, as the instances service's lifecycle events say
(decision 142). Telemetry names a workload and its tenant, not its project, so the
project boundary on GPU metrics and alerts reads the project here.

Every workload is recorded, `default`'s too: a caller who sees some projects alone is
shown the workloads recorded in them, and one not recorded yet (its first event still
on its way) stays hidden rather than shown. The lifecycle topics are kept whole, so a
new monitoring service learns every workload's project from their start.
"""

from __future__ import annotations

from gpucloud_libs.events import CloudEvent
from gpucloud_libs.identity import Identity
from gpucloud_libs.mongo import Document
from gpucloud_libs.naming import job_workload_id, service_workload_id
from gpucloud_libs.workload_events import (
    GpuHoldingTransition,
    InstanceStateChanged,
    JobRunStateChanged,
    ReplicaStateChanged,
)

from .store import MonitoringStore

#: Workloads recorded by this process, not written again (a bound, not a cache: past
#: it, a workload's next event writes the same document once more).
KNOWN_MAX = 100_000


def telemetry_id(transition: GpuHoldingTransition) -> str | None:
    """The workload id the node agent attributes GPUs to (`naming.workload_of`)."""
    if isinstance(transition, InstanceStateChanged):
        return transition.instance_id
    if isinstance(transition, JobRunStateChanged):
        return job_workload_id(transition.job_id)
    if isinstance(transition, ReplicaStateChanged):
        return service_workload_id(transition.service_id)
    return None


class WorkloadProjects:
    def __init__(self, store: MonitoringStore) -> None:
        self._store = store
        self._known: set[tuple[str, str]] = set()

    async def on_lifecycle(self, events: list[CloudEvent]) -> None:
        """Record the project of each workload these lifecycle events name."""
        found: dict[tuple[str, str], str] = {}
        for event in events:
            data = event.data
            if not isinstance(data, GpuHoldingTransition):
                continue
            workload = telemetry_id(data)
            if workload is not None and (data.tenant_id, workload) not in self._known:
                found[(data.tenant_id, workload)] = data.project
        if not found:
            return
        await self._store.record_projects(found)
        if len(self._known) + len(found) > KNOWN_MAX:
            self._known.clear()
        self._known.update(found)

    async def sees(self, identity: Identity, tenant_id: str, workload: str) -> bool:
        """Whether the caller sees the workload's GPUs: one of its projects' (decision
        142)."""
        if identity.projects is None:
            return True
        project = await self._store.workload_project(tenant_id, workload)
        return project is not None and identity.sees_project(project)

    async def seen_match(self, identity: Identity, tenant_id: str) -> Document:
        """A query's condition for the series and alerts of the workloads the caller sees
        (nothing to add for one who sees every project)."""
        if identity.projects is None:
            return {}
        workloads = await self._store.workloads_in(tenant_id, identity.projects)
        return {"instance_id": {"$in": workloads}}

    async def forget_tenant(self, tenant_id: str) -> None:
        await self._store.forget_tenant_projects(tenant_id)
        self._known = {key for key in self._known if key[0] != tenant_id}
