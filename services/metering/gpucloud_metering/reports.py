"""Usage reports: per tenant, instance or job and time range, grouped; CSV; and revenue."""

from __future__ import annotations

import csv
import io
from datetime import datetime

from gpucloud_libs.clock import now
from gpucloud_libs.errors import Forbidden, NotFound, ValidationFailed
from gpucloud_libs.identity import Identity

from . import ledger
from .prices import Prices
from .schemas import GroupBy, UsageReport
from .store import FactStore
from .tally import FaultBook, Tally, instances_from, tally, usage_row


def scope(identity: Identity, tenant_id: str | None) -> str | None:
    """The tenant a read covers: the caller's own, or any (or all) for a platform admin."""
    if identity.is_platform_admin:
        return tenant_id
    if identity.role != "tenant-admin":
        raise Forbidden("usage and billing are for tenant admins")
    return identity.require_tenant()


def _one_workload(instance_id: str | None, job_id: str | None, service_id: str | None) -> str:
    if job_id is not None:
        return f"job {job_id!r}"
    if service_id is not None:
        return f"inference service {service_id!r}"
    return f"instance {instance_id!r}"


def as_csv(report: UsageReport) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow([report.group_by, "gpu_seconds", "gpu_microseconds",
                     "credited_gpu_microseconds", "storage_gb_hours", "amount"])  # fmt: skip
    for row in [*report.rows, report.total]:
        writer.writerow([row.key, f"{row.gpu_microseconds / ledger.US_PER_S:.6f}",
                         row.gpu_microseconds, row.credited_gpu_microseconds,
                         row.storage_gb_hours, row.amount])  # fmt: skip
    return out.getvalue()


class Reports:
    def __init__(self, facts: FactStore, prices: Prices) -> None:
        self._facts = facts
        self._prices = prices

    async def report(
        self, tenant_id: str | None, start: datetime, end: datetime, group_by: GroupBy,
        *, instance_id: str | None = None, job_id: str | None = None,
        service_id: str | None = None, user_id: str | None = None, project: str | None = None,
        seen: tuple[str, ...] | None = None,
    ) -> UsageReport:  # fmt: skip
        """`instance_id`, `job_id` or `service_id` narrows the report to one workload of
        `tenant_id`; `user_id` to the workloads that user started, `project` to those
        of one project of the tenant (GPU time alone: storage is the tenant's). `seen`:
        the projects whose work the caller sees (None: all, decision 142); a workload
        of another reads as one with no usage."""
        if end <= start:
            raise ValidationFailed("`end` must be after `start`")
        as_of = now()
        one = instance_id is not None or job_id is not None or service_id is not None
        if not one:
            transitions = await self._facts.transitions(tenant_id)
        elif tenant_id is None:
            raise ValidationFailed("one workload's usage is read within its tenant")
        elif job_id is not None:
            transitions = await self._facts.transitions_of_job(tenant_id, job_id)
        elif service_id is not None:
            transitions = await self._facts.transitions_of_service(tenant_id, service_id)
        else:
            transitions = await self._facts.transitions_of(tenant_id, {str(instance_id)})
        narrowed = one or user_id is not None or project is not None or seen is not None
        samples = [] if narrowed else await self._facts.samples(tenant_id)
        workloads = instances_from(transitions)
        if seen is not None:
            workloads = [workload for workload in workloads if workload.project in seen]
        if one and not workloads:
            raise NotFound(f"no usage for {_one_workload(instance_id, job_id, service_id)}")
        if user_id is not None:
            workloads = [workload for workload in workloads if workload.user_id == user_id]
        if project is not None:
            workloads = [workload for workload in workloads if workload.project == project]
        rows = tally(
            workloads, samples, await self._prices.book(),
            FaultBook(await self._facts.health()), start_us=ledger.to_us(start), end_us=ledger.to_us(end), now_us=ledger.to_us(as_of),
            group_by=group_by,
        )  # fmt: skip
        total = Tally()
        for tallied in rows.values():
            total.add(tallied)
        return UsageReport(
            tenant_id=tenant_id, start=start, end=end, group_by=group_by,
            rows=[usage_row(key, rows[key]) for key in sorted(rows)], total=usage_row("total", total),
            as_of=as_of,
        )  # fmt: skip
