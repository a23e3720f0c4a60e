"""The tenants' collection, as the gateway's events last said."""

from __future__ import annotations

from typing import Literal

from pymongo.errors import DuplicateKeyError

from gpucloud_libs.mongo import Collection, Database, typed

from ..documents import (
    SpendStopDoc,
    TenantDoc,
    TenantFields,
)
from ..store import TENANT_NAMESPACES, TENANTS


class TenantStore:
    """`tenants` is written by the tenant-event handler; `tenant_namespaces` by the
    controller, a tenant's namespace per cluster (one recorded by a version before
    clusters, keyed by the tenant alone, is applied again once)."""

    def __init__(self, db: Database) -> None:
        self._tenants: Collection[TenantDoc] = typed(db, TENANTS, TenantDoc)
        self._namespaces = db[TENANT_NAMESPACES]

    async def upsert(self, tenant_id: str, fields: TenantFields) -> None:
        await self._tenants.update_one({"_id": tenant_id}, {"$set": fields}, upsert=True)

    async def note_spend_stop(
        self, tenant_id: str, spender: Literal["user", "project"], spender_id: str,
        stop: SpendStopDoc,
    ) -> None:  # fmt: skip
        """A user's spend reached their limit, or a project's its budget (kept apart
        from the tenant's events)."""
        field = "spend_stops" if spender == "user" else "project_stops"
        await self._tenants.update_one(
            {"_id": tenant_id}, {"$set": {f"{field}.{spender_id}": stop}}
        )

    async def get(self, tenant_id: str) -> TenantDoc | None:
        return await self._tenants.find_one({"_id": tenant_id})

    async def all(self) -> list[TenantDoc]:
        return [tenant async for tenant in self._tenants.find({})]

    # The namespace of a tenant in each cluster, applied lazily: `<cluster>/<tenant>`.

    async def applied_version(self, cluster: str, tenant_id: str) -> str | None:
        return (await self.applied_record(cluster, tenant_id))[0]

    async def applied_record(self, cluster: str, tenant_id: str) -> tuple[str | None, bool]:
        """The tenant's version applied in the cluster, and whether a deleted project's
        namespace of it is still to be retired."""
        doc = await self._namespaces.find_one({"_id": f"{cluster}/{tenant_id}"})
        if doc is None:
            return None, False
        return str(doc["version"]), bool(doc.get("retiring"))

    async def applied_versions(self, cluster: str) -> dict[str, str]:
        return {
            doc["tenant"]: str(doc["version"])
            async for doc in self._namespaces.find({"cluster": cluster})
        }

    async def retiring(self, cluster: str) -> set[str]:
        """Tenants with a deleted project's namespace still to retire in the cluster."""
        found = self._namespaces.find({"cluster": cluster, "retiring": True})
        return {doc["tenant"] async for doc in found}

    async def mark_applied(
        self, cluster: str, tenant_id: str, version: str, *, retiring: bool = False
    ) -> None:
        key = f"{cluster}/{tenant_id}"
        change = {
            "$set": {"version": version, "cluster": cluster, "tenant": tenant_id,
                     "retiring": retiring}
        }  # fmt: skip
        try:
            await self._namespaces.update_one({"_id": key}, change, upsert=True)
        except DuplicateKeyError:
            # Two starts of a new tenant applied its namespace at once, and FerretDB's
            # upsert is not atomic: the other one inserted it, so this is an update.
            await self._namespaces.update_one({"_id": key}, change)
