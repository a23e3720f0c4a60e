"""Tenants as the gateway publishes them: what each tenant's namespace must reflect."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Awaitable, Callable

from gpucloud_libs.clock import now
from gpucloud_libs.events import (
    AlertStateChanged,
    ProjectBudgetReached,
    TenantUpserted,
    UserSpendLimitReached,
)
from gpucloud_libs.naming import tenant_namespace

from ..admission import current_period, project_spend_refusal, spend_refusal
from ..documents import (
    ProjectDoc,
    QuotaDoc,
    SpendStopDoc,
    TenantFields,
    UserLimitsDoc,
    WorkloadDocFields,
    workload_project,
)
from ..inference.store import ServiceStore
from ..instances.store import InstanceStore
from ..job_lifecycle import LIVE as LIVE_JOBS
from ..jobs.store import JobStore
from ..lifecycle import ACTIVE, LIVE, State
from ..settings import InstancesSettings
from ..store import RequestStore, instance_key, service_request_key
from ..wakeups import ControllerWakeups, instance_item, job_item, service_item, tenant_item
from .store import TenantStore

STOP_PAGE = 200

log = logging.getLogger(__name__)


def tenant_fields(tenant: TenantUpserted, settings: InstancesSettings) -> TenantFields:
    """The stored tenant, with the namespace quota its GPU quota implies and a version
    the controller compares with the one it applied."""
    quota = tenant.quota
    # The namespace holds borrowed GPUs too; the API's claims keep guaranteed work
    # within max_gpus (docs/queue.md).
    ceiling = quota.max_gpus + quota.borrow_gpus
    cpu = (
        quota.max_cpu_cores
        if quota.max_cpu_cores is not None
        else ceiling * settings.default_cpu_cores_per_gpu
    )
    memory = (
        quota.max_memory_gib
        if quota.max_memory_gib is not None
        else ceiling * settings.default_memory_gib_per_gpu
    )
    namespace_cpu, namespace_memory = str(max(cpu, 1)), f"{max(memory, 1)}Gi"
    stored_quota = QuotaDoc(
        max_gpus=quota.max_gpus, max_instances=quota.max_instances, borrow_gpus=quota.borrow_gpus,
        max_storage_bytes=quota.max_storage_bytes,
        monthly_spend_cap_cents=quota.monthly_spend_cap_cents,
        max_cpu_cores=quota.max_cpu_cores, max_memory_gib=quota.max_memory_gib,
    )  # fmt: skip
    # A project's namespace carries its share: a project made, changed or deleted is a
    # new version to apply (its members are not: they change no namespace object).
    shares = sorted(
        (project_id, project.max_gpus, project.borrow_gpus)
        for project_id, project in tenant.projects.items()
    )
    version = hashlib.sha256(
        json.dumps([stored_quota, namespace_cpu, namespace_memory, shares], sort_keys=True).encode()
    ).hexdigest()[:16]
    return {
        "name": tenant.name,
        "status": tenant.status,
        "quota": stored_quota,
        "namespace_cpu": namespace_cpu,
        "namespace_memory": namespace_memory,
        "namespace": tenant_namespace(tenant.tenant_id),
        "queue_weight": tenant.queue_weight,
        "user_limits": {
            user_id: UserLimitsDoc(
                max_gpus=limits.max_gpus, monthly_spend_cents=limits.monthly_spend_cents
            )
            for user_id, limits in tenant.user_limits.items()
        },
        "projects": {
            project_id: ProjectDoc(
                name=project.name,
                max_gpus=project.max_gpus,
                borrow_gpus=project.borrow_gpus,
                monthly_budget_cents=project.monthly_budget_cents,
                members=list(project.members),
            )
            for project_id, project in tenant.projects.items()
        },
        "updated_at": now(),
        "version": version,
    }


class Tenancy:
    def __init__(
        self,
        settings: InstancesSettings,
        tenants: TenantStore,
        instances: InstanceStore,
        jobs: JobStore,
        services: ServiceStore,
        requests: RequestStore,
        wakeups: ControllerWakeups,
    ) -> None:
        self._settings = settings
        self._tenants = tenants
        self._instances = instances
        self._jobs = jobs
        self._services = services
        self._requests = requests
        self._wakeups = wakeups

    async def apply(self, tenant: TenantUpserted) -> None:
        """Record the tenant's new revision. The work of a project it deleted is
        stopped before (so a redelivery after a crash stops it again) and after, and
        its namespace retired once no pod of it is live (the tenant's reconciler)."""
        before = await self._tenants.get(tenant.tenant_id)
        was: dict[str, ProjectDoc] = (before.get("projects") or {}) if before else {}
        deleted = sorted(was.keys() - tenant.projects.keys())
        await self._stop_projects(tenant.tenant_id, deleted)
        await self._tenants.upsert(tenant.tenant_id, tenant_fields(tenant, self._settings))
        # Again: a start admitted while the first pass ran is recorded by now, and one
        # admitted later finds its project gone when its pod is to be made.
        await self._stop_projects(tenant.tenant_id, deleted)
        await self._wakeups.wake(tenant_item(tenant.tenant_id))

    async def _stop_projects(self, tenant_id: str, deleted: list[str]) -> None:
        for project in deleted:
            stopped = await self.stop_workloads(tenant_id, _in_project(project))
            log.info(
                "a project was deleted: its work stopped",
                extra={"tenant_id": tenant_id, "project": project, "stopped": stopped},
            )

    async def stop_workloads(self, tenant_id: str, mine: Mine = lambda doc: True) -> int:
        """Stop every active instance of the tenant (or those `mine` picks: a user's, a
        project's), cancel every job that has not ended and delete every inference
        service (the tenant is deleted, or over its budget; the user or the project is
        over their own); how many."""
        return (
            await self._stop_instances(tenant_id, mine)
            + await self._cancel_jobs(tenant_id, mine)
            + await self._delete_services(tenant_id, mine)
        )

    async def user_spend_reached(self, reached: UserSpendLimitReached) -> int:
        """A user's spend this month reached their limit: none of theirs is admitted
        until the month ends or the limit is raised, and their workloads stop."""
        await self._tenants.note_spend_stop(
            reached.tenant_id, "user", reached.user_id,
            SpendStopDoc(period=reached.period, limit_cents=reached.limit_cents),
        )  # fmt: skip
        # The commands topic is not ordered with the tenants': the limit may have been
        # raised (or the month turned) since metering said so.
        tenant = await self._tenants.get(reached.tenant_id)
        if tenant is None or spend_refusal(tenant, reached.user_id, current_period()) is None:
            return 0
        stopped = await self.stop_workloads(reached.tenant_id, _started_by(reached.user_id))
        log.info(
            "a user's monthly spend limit was reached",
            extra={"tenant_id": reached.tenant_id, "user": reached.user_id, "stopped": stopped},
        )
        return stopped

    async def project_budget_reached(self, reached: ProjectBudgetReached) -> int:
        """A project's spend this month reached its budget: none of its work is
        admitted until the month ends or the budget is raised, and its workloads stop."""
        await self._tenants.note_spend_stop(
            reached.tenant_id, "project", reached.project,
            SpendStopDoc(period=reached.period, limit_cents=reached.limit_cents),
        )  # fmt: skip
        tenant = await self._tenants.get(reached.tenant_id)  # as for a user, above
        period = current_period()
        if tenant is None or project_spend_refusal(tenant, reached.project, period) is None:
            return 0
        stopped = await self.stop_workloads(reached.tenant_id, _in_project(reached.project))
        log.info(
            "a project's monthly budget was reached",
            extra={"tenant_id": reached.tenant_id, "project": reached.project,
                   "stopped": stopped},
        )  # fmt: skip
        return stopped

    async def _delete_services(self, tenant_id: str, mine: Mine) -> int:
        async def page(after: str | None) -> tuple[list[str], int]:
            docs = await self._services.page(tenant_id, after=after, limit=STOP_PAGE)
            chosen = [doc for doc in docs if mine(doc)]
            for doc in chosen:
                await self._requests.request(service_request_key(doc), "delete")
                await self._wakeups.wake(service_item(doc["_id"]))
            return [doc["_id"] for doc in docs], len(chosen)

        return await _act_on_every_page(page)

    async def _cancel_jobs(self, tenant_id: str, mine: Mine) -> int:
        async def page(after: str | None) -> tuple[list[str], int]:
            docs = await self._jobs.page(
                tenant_id, states=[s.value for s in LIVE_JOBS], after=after, limit=STOP_PAGE
            )
            chosen = [doc for doc in docs if mine(doc)]
            for doc in chosen:
                await self._requests.request(doc["_id"], "cancel")
                await self._wakeups.wake(job_item(doc["_id"]))
            return [doc["_id"] for doc in docs], len(chosen)

        return await _act_on_every_page(page)

    async def stop_idle(self, alert: AlertStateChanged) -> bool:
        """Stop-when-idle: a tenant's `stop_instance` rule fired for one of its instances
        (monitoring watched every GPU of it). The stop carries the rule in its reason;
        the alert itself is the tenant's notice. Whether a stop was asked for."""
        if alert.tenant_id is None or alert.instance_id is None or alert.state != "firing":
            return False
        key = instance_key(alert.tenant_id, alert.instance_id)
        doc = await self._instances.get(key)
        if doc is None or State(doc["state"]) not in ACTIVE:
            return False
        reason = (
            f"idle: GPU {alert.metric} {alert.value:g} under {alert.threshold:g} "
            f"(rule {alert.rule_id})"
        )
        await self._requests.request(key, "stop", reason=reason)
        await self._wakeups.wake(instance_item(key))
        log.info("stopping an idle instance", extra={"instance": key, "rule": alert.rule_id})
        return True

    async def _stop_instances(self, tenant_id: str, mine: Mine) -> int:
        async def page(after: str | None) -> tuple[list[str], int]:
            docs = await self._instances.page(
                tenant_id, states=[s.value for s in LIVE], spec_name=None, after=after,
                limit=STOP_PAGE,
            )  # fmt: skip
            chosen = [doc for doc in docs if mine(doc)]
            for doc in chosen:
                await self._requests.request(doc["_id"], "stop")
                await self._wakeups.wake(instance_item(doc["_id"]))
            return [doc["_id"] for doc in docs], len(chosen)

        return await _act_on_every_page(page)


Mine = Callable[[WorkloadDocFields], bool]


def _started_by(user_id: str) -> Mine:
    """One user's workloads, for a stop."""
    return lambda doc: doc.get("user_id") == user_id


def _in_project(project: str) -> Mine:
    """One project's workloads, for a stop."""
    return lambda doc: workload_project(doc) == project


async def _act_on_every_page(
    page: Callable[[str | None], Awaitable[tuple[list[str], int]]],
) -> int:
    """Act on a listing read STOP_PAGE at a time, each page after the last key: how
    many were acted on (`page` says the keys it read, and how many it acted on)."""
    after, acted = None, 0
    while True:
        keys, done = await page(after)
        acted += done
        if len(keys) < STOP_PAGE:
            return acted
        after = keys[-1]
