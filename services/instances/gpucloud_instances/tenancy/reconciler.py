"""Tenant namespaces: each tenant's namespace with its quota, limits and network policy."""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any

from gpucloud_libs.kube import KubeClient

from .. import manifests
from ..documents import TenantDoc, tenant_namespaces
from ..settings import InstancesSettings
from . import manifests as namespace_manifests
from .store import TenantStore

log = logging.getLogger(__name__)


def tenant_manifests(
    tenant_id: str, tenant: TenantDoc, settings: InstancesSettings
) -> list[dict[str, Any]]:
    """Everything a tenant's namespaces carry, one per project: the seeds' "Tenant VPC"
    (the namespace is the network boundary: a project's pods reach no other's)."""
    quota = tenant["quota"]
    ceiling = quota["max_gpus"] + quota.get("borrow_gpus", 0)
    projects = tenant.get("projects") or {}
    made: list[dict[str, Any]] = []
    for project, namespace_name in tenant_namespaces(tenant).items():
        share = projects.get(project)
        labels = {manifests.TENANT: tenant_id}
        gpus = ceiling
        if share is not None:
            labels[manifests.PROJECT] = project
            if share["max_gpus"] is not None:
                gpus = min(ceiling, share["max_gpus"] + share["borrow_gpus"])
        made += [
            manifests.namespace(namespace_name, labels),
            *(
                [namespace_manifests.role_binding(namespace_name, settings.tenant_storage_role, subject)]
                if (subject := settings.tenant_storage_subject)
                else []
            ),
            namespace_manifests.resource_quota(
                namespace_name, gpus=gpus, instances=quota["max_instances"],
                cpu=tenant["namespace_cpu"], memory=tenant["namespace_memory"],
            ),
            namespace_manifests.limit_range(namespace_name),
            namespace_manifests.network_policy(
                namespace_name, gateway_namespace=settings.gateway_namespace,
                dns_namespace=settings.dns_namespace,
                denied_cidrs=settings.tenant_egress_denied_cidrs,
            ),
        ]  # fmt: skip
    return made


#: Bump when what tenant_manifests builds changes, so every namespace is applied again.
LAYOUT_REVISION = 4


def layout_digest(settings: InstancesSettings) -> str:
    """What, besides the tenant's own version, a namespace's objects depend on."""
    inputs = [
        LAYOUT_REVISION, settings.gateway_namespace, settings.dns_namespace,
        settings.tenant_egress_denied_cidrs, settings.tenant_storage_subject,
    ]  # fmt: skip
    return hashlib.sha256(json.dumps(inputs).encode()).hexdigest()[:12]


class ProjectGone(Exception):
    """A workload's namespace is no longer one of its tenant's: its project was deleted
    after the workload was admitted."""


class TenantReconciler:
    """Applies a tenant's recorded version to its namespaces in one cluster, once per
    version and layout. In the home cluster every tenant has its namespaces; in any
    other, `lazy`, a tenant's are made when its first workload goes there. A deleted
    project's namespace is retired once no pod is left in it."""

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
        # Namespaces this process has seen in place. A newer tenant version is applied
        # by the tenant's own work item, and a namespace this process retires leaves
        # the set, so a start in one of these needs no look at the applied version
        # (the tenant is read each time: its project may be gone).
        self._in_place: set[str] = set()

    def _wanted(self, tenant: TenantDoc) -> str:
        return f"{tenant['version']}+{self._layout}"

    async def applied(self, tenant: TenantDoc) -> bool:
        return await self._tenants.applied_version(self._cluster, tenant["_id"]) == self._wanted(
            tenant
        )

    async def ensure(self, tenant_id: str, namespace: str) -> bool:
        """Make sure the namespace a workload of the tenant goes in exists before its
        pod does; False when the tenant is not known here yet. `ProjectGone` when the
        namespace is no longer one of the tenant's: its project was deleted (a start
        that raced the deletion)."""
        tenant = await self._tenants.get(tenant_id)
        if tenant is None:
            return False
        namespaces = tenant_namespaces(tenant).values()
        if namespace not in namespaces:
            raise ProjectGone(namespace)
        if namespace in self._in_place:
            return True
        if not await self.applied(tenant):
            await self.reconcile(tenant_id, first=True)
            if not await self.applied(tenant):
                return False
        self._in_place.update(namespaces)
        return True

    async def reconcile(self, tenant_id: str, *, first: bool = False) -> None:
        """Apply the tenant's version (in a lazy cluster, only where its namespaces were
        made already, or are made `first` now), and retire its deleted projects'. The
        version counts as applied before the retirement, which waits for the deleted
        projects' pods to end and so never holds up the tenant's starts."""
        tenant = await self._tenants.get(tenant_id)
        if tenant is None:
            return
        applied, retiring = await self._tenants.applied_record(self._cluster, tenant_id)
        wanted = self._wanted(tenant)
        if (applied == wanted and not retiring) or (self._lazy and applied is None and not first):
            return
        if applied != wanted:
            for manifest in tenant_manifests(tenant_id, tenant, self._settings):
                await self._kube.ensure(manifest)
            log.info(
                "tenant namespaces applied",
                extra={"tenant": tenant_id, "namespace": tenant["namespace"],
                       "cluster": self._cluster},
            )  # fmt: skip
        deleted = await self._deleted_projects(tenant_id, set(tenant_namespaces(tenant).values()))
        await self._tenants.mark_applied(self._cluster, tenant_id, wanted, retiring=bool(deleted))
        if deleted and all([await self._retire(tenant_id, name) for name in deleted]):
            await self._tenants.mark_applied(self._cluster, tenant_id, wanted)

    async def _deleted_projects(self, tenant_id: str, wanted: set[str]) -> list[str]:
        """The namespaces of the tenant's projects that are gone, here."""
        found, _ = await self._kube.list(
            "Namespace", label_selector=f"{manifests.TENANT}={tenant_id},{manifests.PROJECT}"
        )
        return [ns["metadata"]["name"] for ns in found if ns["metadata"]["name"] not in wanted]

    async def _retire(self, tenant_id: str, name: str) -> bool:
        """Delete a deleted project's namespace once no pod of it is live (the project's
        work was stopped when it was deleted; ended pods go with the namespace) and no
        volume's claim is left in it (its volumes are the tenant's data: they fall to
        `default`, and the namespace goes once they are deleted, decision 140); False
        while one is."""
        self._in_place.discard(name)
        live, _ = await self._kube.list(
            "Pod",
            field_selector=f"metadata.namespace={name},status.phase!=Succeeded,status.phase!=Failed",
        )
        if live or await self._holds_volumes(name):
            return False
        await self._kube.delete("Namespace", None, name)
        log.info(
            "a deleted project's namespace retired",
            extra={"tenant": tenant_id, "namespace": name, "cluster": self._cluster},
        )
        return True

    async def _holds_volumes(self, namespace: str) -> bool:
        """Whether a volume's claim is left in the namespace. Volumes are the home
        cluster's alone (the lazy clusters hold none), so only there is it asked."""
        if self._lazy:
            return False
        claims, _ = await self._kube.list(
            "PersistentVolumeClaim", field_selector=f"metadata.namespace={namespace}"
        )
        return bool(claims)

    async def stale(self) -> list[str]:
        """Tenants whose recorded version is not the one applied, or with a deleted
        project's namespace to retire (in a lazy cluster, of those whose namespaces
        were made)."""
        applied = await self._tenants.applied_versions(self._cluster)
        retiring = await self._tenants.retiring(self._cluster)
        return [
            tenant["_id"]
            for tenant in await self._tenants.all()
            if (applied.get(tenant["_id"]) != self._wanted(tenant) or tenant["_id"] in retiring)
            and not (self._lazy and tenant["_id"] not in applied)
        ]
