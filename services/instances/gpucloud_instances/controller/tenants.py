"""Tenant namespaces: each tenant's namespace with its quota, limits and network policy."""

from __future__ import annotations

import logging
from typing import Any

from gpucloud_libs.kube import KubeClient

from .. import manifests
from ..documents import TenantDoc
from ..store import TenantStore

log = logging.getLogger(__name__)


def tenant_manifests(
    tenant_id: str, tenant: TenantDoc, *, gateway_namespace: str
) -> list[dict[str, Any]]:
    """Everything a tenant's namespace carries: the seeds' "Tenant VPC"."""
    namespace_name = tenant["namespace"]
    quota = tenant["quota"]
    return [
        manifests.namespace(namespace_name, {manifests.TENANT: tenant_id}),
        manifests.resource_quota(
            namespace_name, gpus=quota["max_gpus"], instances=quota["max_instances"],
            cpu=tenant["namespace_cpu"], memory=tenant["namespace_memory"],
        ),
        manifests.limit_range(namespace_name),
        manifests.network_policy(namespace_name, gateway_namespace=gateway_namespace),
    ]  # fmt: skip


class TenantReconciler:
    """Applies a tenant's recorded version to its namespace, once per version."""

    def __init__(self, kube: KubeClient, tenants: TenantStore, *, gateway_namespace: str) -> None:
        self._kube = kube
        self._tenants = tenants
        self._gateway_namespace = gateway_namespace

    async def reconcile(self, tenant_id: str) -> None:
        tenant = await self._tenants.get(tenant_id)
        if tenant is None or await self._tenants.applied_version(tenant_id) == tenant["version"]:
            return
        for manifest in tenant_manifests(
            tenant_id, tenant, gateway_namespace=self._gateway_namespace
        ):
            await self._kube.ensure(manifest)
        await self._tenants.mark_applied(tenant_id, tenant["version"])
        log.info(
            "tenant namespace applied",
            extra={"tenant": tenant_id, "namespace": tenant["namespace"]},
        )

    async def stale(self) -> list[str]:
        """Tenants whose recorded version is not the one applied."""
        applied = await self._tenants.applied_versions()
        return [
            tenant["_id"]
            for tenant in await self._tenants.all()
            if applied.get(tenant["_id"]) != tenant["version"]
        ]
