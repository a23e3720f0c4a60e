"""Tenants as the gateway publishes them: their storage quota, their projects' members,
and their deletion."""

from __future__ import annotations

from gpucloud_libs.events import TenantUpserted

from .attachments import Attachments
from .store import AttachmentStore, TenantStore
from .teardown import Teardown


class Tenancy:
    def __init__(
        self,
        tenants: TenantStore,
        attachments: AttachmentStore,
        attachment_grants: Attachments,
        teardown: Teardown,
    ) -> None:
        self._tenants = tenants
        self._attachments = attachments
        self._attachment_grants = attachment_grants
        self._teardown = teardown

    async def apply(self, tenant: TenantUpserted) -> None:
        projects = {
            project_id: {"members": list(share.members)}
            for project_id, share in tenant.projects.items()
        }
        await self._tenants.upsert(
            tenant.tenant_id,
            {"status": tenant.status, "max_storage_bytes": tenant.quota.max_storage_bytes,
             "projects": projects},
        )  # fmt: skip

    async def delete(self, tenant_id: str) -> None:
        """A deleted tenant's storages go with it, objects included (in the background:
        emptying buckets must not hold up the tenant events behind this one)."""
        for attachment in await self._attachments.of_tenant(tenant_id):
            await self._attachment_grants.release(tenant_id, attachment["instance_id"])
        await self._teardown.delete_all_of_tenant(tenant_id)
        await self._tenants.remove(tenant_id)
