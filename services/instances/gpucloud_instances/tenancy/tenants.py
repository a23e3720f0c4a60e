"""Tenants as the gateway publishes them: what each tenant's namespace must reflect."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from gpucloud_libs.clock import now
from gpucloud_libs.events import AlertStateChanged, TenantUpserted
from gpucloud_libs.naming import tenant_namespace

from ..documents import QuotaDoc, TenantFields
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
    version = hashlib.sha256(
        json.dumps([stored_quota, namespace_cpu, namespace_memory], sort_keys=True).encode()
    ).hexdigest()[:16]
    return {
        "name": tenant.name,
        "status": tenant.status,
        "quota": stored_quota,
        "namespace_cpu": namespace_cpu,
        "namespace_memory": namespace_memory,
        "namespace": tenant_namespace(tenant.tenant_id),
        "queue_weight": tenant.queue_weight,
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
        await self._tenants.upsert(tenant.tenant_id, tenant_fields(tenant, self._settings))
        await self._wakeups.wake(tenant_item(tenant.tenant_id))

    async def stop_workloads(self, tenant_id: str) -> int:
        """Stop every active instance of the tenant, cancel every job that has not
        ended and delete every inference service (the tenant is deleted, or over its
        budget); how many."""
        return (
            await self._stop_instances(tenant_id)
            + await self._cancel_jobs(tenant_id)
            + await self._delete_services(tenant_id)
        )

    async def _delete_services(self, tenant_id: str) -> int:
        async def page(after: str | None) -> list[str]:
            docs = await self._services.page(tenant_id, after=after, limit=STOP_PAGE)
            for doc in docs:
                await self._requests.request(service_request_key(doc), "delete")
                await self._wakeups.wake(service_item(doc["_id"]))
            return [doc["_id"] for doc in docs]

        return sum([1 async for _ in _every_page(page)])

    async def _cancel_jobs(self, tenant_id: str) -> int:
        async def page(after: str | None) -> list[str]:
            docs = await self._jobs.page(
                tenant_id, states=[s.value for s in LIVE_JOBS], after=after, limit=STOP_PAGE
            )
            return [doc["_id"] for doc in docs]

        cancelled = 0
        async for key in _every_page(page):
            await self._requests.request(key, "cancel")
            await self._wakeups.wake(job_item(key))
            cancelled += 1
        return cancelled

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

    async def _stop_instances(self, tenant_id: str) -> int:
        async def page(after: str | None) -> list[str]:
            docs = await self._instances.page(
                tenant_id, states=[s.value for s in LIVE], spec_name=None, after=after,
                limit=STOP_PAGE,
            )  # fmt: skip
            return [doc["_id"] for doc in docs]

        stopped = 0
        async for key in _every_page(page):
            await self._requests.request(key, "stop")
            await self._wakeups.wake(instance_item(key))
            stopped += 1
        return stopped


async def _every_page(
    page: Callable[[str | None], Awaitable[list[str]]],
) -> AsyncIterator[str]:
    """Every key of a listing read STOP_PAGE at a time, each page after the last key."""
    after = None
    while True:
        keys = await page(after)
        for key in keys:
            yield key
        if len(keys) < STOP_PAGE:
            return
        after = keys[-1]
