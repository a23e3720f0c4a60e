"""A caller's storages: every capability finds a storage here, scoped by the caller's
tenant, and by project (decision 140): a project's storages are its members' (and the
tenant admins'); `default`'s are everyone's, so a key of one project sees its own
project's and `default`'s, as its work takes them.

A storage of another tenant, one of a project the caller is not in, and a missing one
look the same (404).
"""

from __future__ import annotations

import asyncio

from gpucloud_libs.errors import Conflict, ValidationFailed
from gpucloud_libs.identity import Identity
from gpucloud_libs.mongo import Document
from gpucloud_libs.naming import DEFAULT_PROJECT
from gpucloud_libs.project_shares import storage_refusal, unseen_work

from .documents import StorageDoc, TenantDoc
from .store import StorageStore, TenantStore, storage_key


def storage_project(doc: StorageDoc, tenant: TenantDoc | None) -> str:
    """The project a storage belongs to: its own while that project exists; `default`
    for one from before projects, and once its project is deleted (so its data stays
    in reach of the tenant, not of no one)."""
    project = doc.get("project") or DEFAULT_PROJECT
    return project if project in _projects(tenant) else DEFAULT_PROJECT


def may_see(identity: Identity, project: str) -> bool:
    """Whether the caller may see and use the storages of `project`: `default`'s, and
    those of the projects whose work it sees (decision 142), as its work takes them."""
    return project == DEFAULT_PROJECT or identity.sees_project(project)


def visible_match(identity: Identity, tenant: TenantDoc | None) -> Document:
    """A store query's condition for the storages the caller may see."""
    projects = _projects(tenant)
    hidden = [project for project in projects if not may_see(identity, project)]
    return {"project": {"$nin": hidden}} if hidden else {}


def _projects(tenant: TenantDoc | None) -> dict[str, dict[str, list[str]]]:
    return (tenant.get("projects") if tenant is not None else None) or {}


class StorageNotReady(Conflict):
    code = "storage_not_ready"
    title = "Storage not ready"


class OwnedStorages:
    def __init__(self, storages: StorageStore, tenants: TenantStore) -> None:
        self._storages = storages
        self._tenants = tenants

    async def get(self, identity: Identity, storage_id: str) -> StorageDoc:
        return (await self._found(identity, storage_id))[0]

    async def _found(self, identity: Identity, storage_id: str) -> tuple[StorageDoc, str]:
        """The storage and the project it belongs to."""
        tenant_id = identity.require_tenant()
        doc, tenant = await asyncio.gather(
            self._storages.get(storage_key(tenant_id, storage_id)), self._tenants.get(tenant_id)
        )
        project = storage_project(doc, tenant) if doc is not None else DEFAULT_PROJECT
        if doc is None or not may_see(identity, project):
            raise unseen_work("storage", storage_id, identity.projects)
        return doc, project

    async def for_work(self, identity: Identity, storage_id: str, project: str) -> StorageDoc:
        """The caller's storage, ready, for work of `project`: one of that project's, or
        of `default` (everyone's); a 409 naming the storage's project otherwise."""
        doc, owner = await self._found(identity, storage_id)
        if (refusal := storage_refusal(storage_id, owner, project)) is not None:
            raise refusal
        return _usable(doc)

    async def ready(
        self, identity: Identity, storage_id: str, kind: str | None = None
    ) -> StorageDoc:
        """The caller's storage, ready for use (and of `kind`, when given)."""
        doc = await self.get(identity, storage_id)
        if kind is not None and doc["kind"] != kind:
            raise ValidationFailed(
                f"storage {storage_id!r} is a {doc['kind']} storage; this needs an {kind} storage"
            )
        return _usable(doc)


def _usable(doc: StorageDoc) -> StorageDoc:
    """The storage, ready for use; a 409 to retry otherwise."""
    if doc["state"] != "ready":
        raise StorageNotReady(
            f"storage {doc['storage_id']!r} is {doc['state']}", state=doc["state"],
            retry_after_s=2,
        )  # fmt: skip
    return doc
