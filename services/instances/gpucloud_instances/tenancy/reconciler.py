"""Tenant namespaces: each tenant's namespace with its quota, limits and network policy."""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any

from gpucloud_libs.kube import KubeClient

from .. import manifests
from ..documents import TenantDoc
from ..settings import InstancesSettings
from . import manifests as namespace_manifests
from .store import TenantStore

log = logging.getLogger(__name__)


def tenant_manifests(
    tenant_id: str, tenant: TenantDoc, settings: InstancesSettings
) -> list[dict[str, Any]]:
    """Everything a tenant's namespace carries: the seeds' "Tenant VPC"."""
    namespace_name = tenant["namespace"]
    quota = tenant["quota"]
    storage_access = (
        [namespace_manifests.role_binding(namespace_name, settings.tenant_storage_role, subject)]
        if (subject := settings.tenant_storage_subject)
        else []
    )
    return [
        manifests.namespace(namespace_name, {manifests.TENANT: tenant_id}),
        *storage_access,
        namespace_manifests.resource_quota(
            namespace_name, gpus=quota["max_gpus"] + quota.get("borrow_gpus", 0),
            instances=quota["max_instances"],
            cpu=tenant["namespace_cpu"], memory=tenant["namespace_memory"],
        ),
        namespace_manifests.limit_range(namespace_name),
        namespace_manifests.network_policy(
            namespace_name, gateway_namespace=settings.gateway_namespace,
            dns_namespace=settings.dns_namespace,
            denied_cidrs=settings.tenant_egress_denied_cidrs,
        ),
    ]  # fmt: skip


#: Bump when what tenant_manifests builds changes, so every namespace is applied again.
LAYOUT_REVISION = 3


def layout_digest(settings: InstancesSettings) -> str:
    """What, besides the tenant's own version, a namespace's objects depend on."""
    inputs = [
        LAYOUT_REVISION, settings.gateway_namespace, settings.dns_namespace,
        settings.tenant_egress_denied_cidrs, settings.tenant_storage_subject,
    ]  # fmt: skip
    return hashlib.sha256(json.dumps(inputs).encode()).hexdigest()[:12]


class TenantReconciler:
    """Applies a tenant's recorded version to its namespace in one cluster, once per
    version and layout. In the home cluster every tenant has its namespace; in any
    other, `lazy`, a tenant's is made when its first workload goes there."""

    def __init__(
        self, cluster: str, kube: KubeClient, tenants: TenantStore, settings: InstancesSettings,
        *, lazy: bool = False,
    ) -> None:  # fmt: skip
        self._cluster = cluster
        self._lazy = lazy
        self._kube = kube
        self._tenants = tenants
        self._settings = settings
        self._layout = layout_digest(settings)
        # Tenants whose namespace this process has seen in place. Namespaces are never
        # removed, and a newer tenant version is applied by the tenant's own work item,
        # so a start of such a tenant needs no lookup.
        self._in_place: set[str] = set()

    def _wanted(self, tenant: TenantDoc) -> str:
        return f"{tenant['version']}+{self._layout}"

    async def applied(self, tenant: TenantDoc) -> bool:
        return await self._tenants.applied_version(self._cluster, tenant["_id"]) == self._wanted(
            tenant
        )

    async def ensure(self, tenant_id: str) -> bool:
        """Make sure the tenant's namespace exists before a pod goes in; False when the
        tenant is not known here yet."""
        if tenant_id in self._in_place:
            return True
        tenant = await self._tenants.get(tenant_id)
        if tenant is None:
            return False
        if not await self.applied(tenant):
            await self.reconcile(tenant_id, first=True)
        self._in_place.add(tenant_id)
        return True

    async def reconcile(self, tenant_id: str, *, first: bool = False) -> None:
        """Apply the tenant's version (in a lazy cluster, only where its namespace was
        made already, or is made `first` now)."""
        tenant = await self._tenants.get(tenant_id)
        if tenant is None:
            return
        applied = await self._tenants.applied_version(self._cluster, tenant_id)
        if applied == self._wanted(tenant) or (self._lazy and applied is None and not first):
            return
        for manifest in tenant_manifests(tenant_id, tenant, self._settings):
            await self._kube.ensure(manifest)
        await self._tenants.mark_applied(self._cluster, tenant_id, self._wanted(tenant))
        log.info(
            "tenant namespace applied",
            extra={"tenant": tenant_id, "namespace": tenant["namespace"], "cluster": self._cluster},
        )

    async def stale(self) -> list[str]:
        """Tenants whose recorded version is not the one applied (in a lazy cluster,
        of those whose namespace was made)."""
        applied = await self._tenants.applied_versions(self._cluster)
        return [
            tenant["_id"]
            for tenant in await self._tenants.all()
            if applied.get(tenant["_id"]) != self._wanted(tenant)
            and not (self._lazy and tenant["_id"] not in applied)
        ]
