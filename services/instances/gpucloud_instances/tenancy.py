"""Tenants as the gateway publishes them: what each tenant's namespace must reflect."""

from __future__ import annotations

import hashlib
import json

from gpucloud_libs.clock import now
from gpucloud_libs.events import TenantUpserted
from gpucloud_libs.mongo import Document
from gpucloud_libs.naming import tenant_namespace

from .lifecycle import ACTIVE
from .settings import InstancesSettings
from .store import InstanceStore, RequestStore, TenantStore
from .wakeups import ControllerWakeups, tenant_item

STOP_PAGE = 200


def tenant_fields(tenant: TenantUpserted, settings: InstancesSettings) -> Document:
    """The stored tenant, with the namespace quota its GPU quota implies and a version
    the controller compares with the one it applied."""
    quota = tenant.quota
    cpu = (
        quota.max_cpu_cores
        if quota.max_cpu_cores is not None
        else quota.max_gpus * settings.default_cpu_cores_per_gpu
    )
    memory = (
        quota.max_memory_gib
        if quota.max_memory_gib is not None
        else quota.max_gpus * settings.default_memory_gib_per_gpu
    )
    fields: Document = {
        "name": tenant.name,
        "status": tenant.status,
        "quota": quota.model_dump(),
        "namespace_cpu": str(max(cpu, 1)),
        "namespace_memory": f"{max(memory, 1)}Gi",
        "namespace": tenant_namespace(tenant.tenant_id),
        "updated_at": now(),
    }
    fields["version"] = hashlib.sha256(
        json.dumps(
            [fields["quota"], fields["namespace_cpu"], fields["namespace_memory"]], sort_keys=True
        ).encode()
    ).hexdigest()[:16]
    return fields


class Tenancy:
    def __init__(
        self,
        settings: InstancesSettings,
        tenants: TenantStore,
        instances: InstanceStore,
        requests: RequestStore,
        wakeups: ControllerWakeups,
    ) -> None:
        self._settings = settings
        self._tenants = tenants
        self._instances = instances
        self._requests = requests
        self._wakeups = wakeups

    async def apply(self, tenant: TenantUpserted) -> None:
        await self._tenants.upsert(tenant.tenant_id, tenant_fields(tenant, self._settings))
        await self._wakeups.wake(tenant_item(tenant.tenant_id))

    async def stop_instances(self, tenant_id: str) -> int:
        """Ask for a stop of every active instance of the tenant; how many."""
        stopped = 0
        after = None
        while True:
            page = await self._instances.page(
                tenant_id, states=[s.value for s in ACTIVE], spec_name=None, after=after,
                limit=STOP_PAGE,
            )  # fmt: skip
            for doc in page:
                await self._requests.request(doc["_id"], "stop")
                self._wakeups.wake_local(doc["_id"])
                stopped += 1
            if len(page) < STOP_PAGE:
                return stopped
            after = page[-1]["_id"]
