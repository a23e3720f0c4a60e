"""Metric queries: GPUs and their series per GPU, instance, tenant and node.

A tenant sees only the windows its own instances used a GPU (roll-ups are
split by user), and never the GPU's hardware identity or who else used it.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from gpucloud_libs.clock import aware
from gpucloud_libs.errors import NotFound, ValidationFailed
from gpucloud_libs.identity import Identity
from gpucloud_libs.mongo import Document
from gpucloud_libs.naming import gpu_product, job_workload_id, service_workload_id

from .documents import RollupDoc
from .schemas import GpuView, MetricPoint, MetricSeries
from .store import HOURS, MINUTES, MonitoringStore
from .workload_projects import WorkloadProjects


def _mean(values: list[float]) -> float:
    return round(sum(values) / len(values), 3)


def points(subject: str, resolution: str, docs: list[RollupDoc]) -> MetricSeries:
    """One point per window: GPUs averaged (a node's, a tenant's), maxima kept."""
    by_start: dict[datetime, list[RollupDoc]] = defaultdict(list)
    for doc in docs:
        by_start[aware(doc["start"])].append(doc)
    points = []
    for start, group in sorted(by_start.items()):
        points.append(
            MetricPoint(
                start=start,
                gpus=len({d["gpu_uuid"] for d in group}),
                utilization_gpu_pct=_mean([d["utilization_gpu_pct_avg"] for d in group]),
                utilization_gpu_pct_max=max(d["utilization_gpu_pct_max"] for d in group),
                utilization_memory_pct=_mean([d["utilization_memory_pct_avg"] for d in group]),
                memory_used_mib=_mean([d["memory_used_mib_avg"] for d in group]),
                temperature_c=_mean([d["temperature_c_avg"] for d in group]),
                temperature_c_max=max(d["temperature_c_max"] for d in group),
                power_w=_mean([d["power_w_avg"] for d in group]),
                ecc_uncorrected=max(d["ecc_uncorrected"] for d in group),
                xids=sorted({x for d in group for x in d["xids"]}),
            )
        )
    return MetricSeries(subject=subject, resolution=resolution, points=points)


@dataclass(frozen=True)
class Workload:
    """What a metrics read names: its kind and id as the tenant knows them, and the id
    its GPUs' samples carry (a job's runs and a service's replicas share one)."""

    kind: str
    name: str
    telemetry_id: str

    @classmethod
    def instance(cls, instance_id: str) -> Workload:
        return cls("instance", instance_id, instance_id)

    @classmethod
    def job(cls, job_id: str) -> Workload:
        return cls("job", job_id, job_workload_id(job_id))

    @classmethod
    def service(cls, service_id: str) -> Workload:
        return cls("inference service", service_id, service_workload_id(service_id))


class Metrics:
    def __init__(self, store: MonitoringStore, projects: WorkloadProjects) -> None:
        self._store = store
        self._projects = projects

    async def gpus(self, identity: Identity) -> list[GpuView]:
        seen: set[str] | None = None
        if identity.projects is not None:
            match = await self._projects.seen_match(identity, identity.require_tenant())
            seen = set(match["instance_id"]["$in"])
        statuses = await self._store.node_statuses()
        healths = await self._store.healths()
        views = []
        for node, inventory in (await self._store.inventories()).items():
            current = statuses[node]["gpus"] if node in statuses else {}
            health = healths[node]["health"] if node in healths else "healthy"
            for gpu in inventory["gpus"]:
                status = current.get(gpu["gpu_uuid"])
                owner = status["tenant_id"] if status else None
                if not identity.is_platform_admin and owner != identity.tenant_id:
                    continue
                if seen is not None and (status is None or status["instance_id"] not in seen):
                    continue  # another project's work (decision 142)
                views.append(
                    GpuView(
                        gpu_uuid=gpu["gpu_uuid"],
                        node=node,
                        index=gpu["index"],
                        name=gpu["name"],
                        gpu_type=gpu_product(gpu["name"]),
                        tier=gpu["tier"],
                        tier_reasons=gpu["tier_reasons"],
                        memory_total_mib=gpu["memory_total_mib"],
                        health=health,
                        instance_id=status["instance_id"] if status else None,
                        tenant_id=owner if identity.is_platform_admin else None,
                        utilization_gpu_pct=status["utilization_gpu_pct_avg"] if status else None,
                        temperature_c=status["temperature_c_avg"] if status else None,
                        **(
                            {
                                k: gpu.get(k)
                                for k in (
                                    "serial",
                                    "driver_version",
                                    "cuda_version",
                                    "pcie_gen_current",
                                    "pcie_width_current",
                                    "mig_mode",
                                    "nvlink_links_active",
                                )
                            }
                            if identity.is_platform_admin
                            else {}
                        ),
                    )
                )
        return views

    async def gpu_metrics(
        self, identity: Identity, gpu_uuid: str, start: datetime, end: datetime, resolution: str
    ) -> MetricSeries:
        query: Document = {"gpu_uuid": gpu_uuid}
        if not identity.is_platform_admin:
            query["tenant_id"] = identity.require_tenant()
            query |= await self._projects.seen_match(identity, query["tenant_id"])
        docs = await self._series(query, start, end, resolution)
        if not docs and not identity.is_platform_admin:
            raise NotFound(f"no metrics of GPU {gpu_uuid!r} for this tenant")
        return points(gpu_uuid, resolution, docs)

    async def workload_metrics(
        self, identity: Identity, workload: Workload, start: datetime, end: datetime,
        resolution: str, tenant_id: str | None,
    ) -> MetricSeries:  # fmt: skip
        """The GPUs of one instance, job (its runs) or inference service (its replicas)
        over time, under the workload id the node agent attributes them to."""
        if identity.is_platform_admin:
            if tenant_id is None:
                raise ValidationFailed(f"the platform admin names the {workload.kind}'s tenantID")
        else:
            tenant_id = identity.require_tenant()
        seen = await self._projects.sees(identity, tenant_id, workload.telemetry_id)
        docs = await self._series(
            {"tenant_id": tenant_id, "instance_id": workload.telemetry_id}, start, end, resolution
        )
        if not docs or not seen:
            raise NotFound(f"no metrics of {workload.kind} {workload.name!r}")
        return points(workload.name, resolution, docs)

    async def tenant_metrics(
        self, identity: Identity, start: datetime, end: datetime, resolution: str,
        tenant_id: str | None,
    ) -> MetricSeries:  # fmt: skip
        if not identity.is_platform_admin:
            tenant_id = identity.require_tenant()
        elif tenant_id is None:
            raise ValidationFailed("the platform admin names the tenantID")
        query: Document = {"tenant_id": tenant_id}
        if not identity.is_platform_admin:
            query |= await self._projects.seen_match(identity, identity.require_tenant())
        docs = await self._series(query, start, end, resolution)
        return points(tenant_id or "", resolution, docs)

    async def node_metrics(
        self, identity: Identity, node: str, start: datetime, end: datetime, resolution: str
    ) -> MetricSeries:
        identity.require_role("platform-admin")
        docs = await self._series({"node": node}, start, end, resolution)
        if not docs:
            raise NotFound(f"no metrics of node {node!r}")
        return points(node, resolution, docs)

    async def _series(
        self, query: Document, start: datetime, end: datetime, resolution: str
    ) -> list[RollupDoc]:
        if end <= start:
            raise ValidationFailed("end must be after start")
        if resolution == "1m" and end - start > timedelta(days=2):
            raise ValidationFailed("at 1m, ask for at most 2 days; use resolution=1h")
        collection = MINUTES if resolution == "1m" else HOURS
        return await self._store.series(collection, query, start, end, limit=50_000)
