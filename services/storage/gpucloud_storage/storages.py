"""Storages: object storages (a bucket with a hard quota) and volume storages (a PVC).

A storage document is written before anything is made in the backend, so a
crash leaves a record the sweep can finish (provisioning) or undo (deleting).
"""

from __future__ import annotations

import logging
import secrets

from gpucloud_libs.clock import now
from gpucloud_libs.errors import (
    Conflict,
    DependencyUnavailable,
    QuotaExceeded,
    TenantNotReady,
    ValidationFailed,
)
from gpucloud_libs.http import decode_cursor, encode_cursor
from gpucloud_libs.identity import Identity
from gpucloud_libs.kube import KubeClient, KubeError, Manifest, NotFoundError
from gpucloud_libs.mongo import Document
from gpucloud_libs.naming import DEFAULT_PROJECT, storage_claim_name
from gpucloud_libs.project_shares import acting_project, may_act_in, unknown_project
from gpucloud_libs.tenants import require_active

from . import manifests
from .backend import BackendError, ObjectBackend
from .documents import StorageDoc, TenantDoc, volume_namespace
from .ownership import OwnedStorages, storage_project, visible_match
from .schemas import Storage, StorageCreate, StoragePage, StorageUpdate
from .settings import StorageSettings
from .store import AttachmentStore, StorageStore, TenantStore, storage_key
from .teardown import StorageNotEmpty, Teardown

log = logging.getLogger(__name__)

#: A storage this long in provisioning or deleting was left by a crash.
UNFINISHED_AFTER_S = 10.0


class StorageAttached(Conflict):
    code = "storage_attached"
    title = "Storage attached to instances"


class ResizeRefused(Conflict):
    code = "resize_refused"
    title = "Volume cannot be resized"


def held_bytes(doc: StorageDoc) -> int:
    """What a storage holds of its tenant's quota: its size, or more while a larger
    resize of it is in flight."""
    return max([doc["size_bytes"], *doc.get("reservations", {}).values()])


class Storages:
    def __init__(
        self,
        settings: StorageSettings,
        backend: ObjectBackend,
        kube: KubeClient,
        tenants: TenantStore,
        storages: StorageStore,
        attachments: AttachmentStore,
        owned: OwnedStorages,
        teardown: Teardown,
    ) -> None:
        self._settings = settings
        self._backend = backend
        self._kube = kube
        self._tenants = tenants
        self._storages = storages
        self._attachments = attachments
        self._owned = owned
        self._teardown = teardown

    async def create(self, identity: Identity, body: StorageCreate) -> Storage:
        tenant_id = identity.require_tenant()
        tenant = require_active(await self._tenants.get(tenant_id), service="storage")
        if body.kind == "object" and body.storage_class is not None:
            raise ValidationFailed("storageClass applies to volume storages only")
        offered = {self._settings.default_storage_class, *self._settings.storage_classes}
        if body.storage_class is not None and body.storage_class not in offered:
            message = (
                f"storage class {body.storage_class!r} is not offered here; "
                f"choose one of {', '.join(sorted(offered))}"
            )
            raise ValidationFailed(
                message,
                errors=[{"loc": ["body", "storageClass"], "msg": message, "type": "value_error"}],
            )
        project = _owning_project(identity, tenant, body)
        storage_id = body.storage_id or f"s-{secrets.token_hex(6)}"
        key = storage_key(tenant_id, storage_id)
        created = now()
        doc: StorageDoc = {
            "_id": key,
            "tenant_id": tenant_id,
            "storage_id": storage_id,
            "name": body.name,
            "kind": body.kind,
            "state": "provisioning",
            "message": None,
            "size_bytes": body.size_bytes,
            "created_by": identity.subject,
            "created_at": created,
            "updated_at": created,
            "project": project,
        }
        if body.kind == "object":
            # Bucket names are global and at most 63 characters: not derived from ids.
            doc["bucket"] = f"gpc-{secrets.token_hex(12)}"
        else:
            doc["storage_class"] = body.storage_class or self._settings.default_storage_class
            doc["access_mode"] = body.access_mode
        async with self._storages.quota_turn(tenant_id):
            if not await self._storages.insert(doc):
                raise Conflict(f"a storage with the id {storage_id!r} already exists")
            try:
                await self._check_tenant_quota(tenant, storage_id, body.size_bytes)
            except QuotaExceeded:
                await self._storages.remove(key)
                raise
        return self.view(await self._provision(doc))

    async def _check_tenant_quota(self, tenant: TenantDoc, storage_id: str, size: int) -> None:
        """Refuse `size` for `storage_id` unless it fits beside what every other storage
        holds. Called in the tenant's quota turn, with the claim (an inserted storage,
        a reservation) recorded in the same turn: a claim another request sees has
        passed its check, so racing requests pass exactly as if they came one by one."""
        limit = tenant["max_storage_bytes"]
        others = sum(
            held_bytes(doc)
            for doc in await self._storages.of_tenant(tenant["_id"])
            if doc["storage_id"] != storage_id
        )
        if others + size > limit:
            raise QuotaExceeded(
                f"the tenant's storage quota is {limit} bytes; {others} are allocated "
                f"and this asks for {size}",
                limit_bytes=limit,
                allocated_bytes=others,
            )

    async def _provision(self, doc: StorageDoc) -> StorageDoc:
        """Make the bucket or claim; on a transient failure the sweep tries again."""
        try:
            if doc["kind"] == "object":
                await self._backend.create_bucket(doc["bucket"], doc["size_bytes"])
            else:
                await self._kube.ensure(self._claim(doc))
        except NotFoundError:
            message = "waiting for the namespace of its project"
        except (BackendError, KubeError, DependencyUnavailable) as error:
            log.warning("provisioning failed", extra={"storage": doc["_id"], "error": str(error)})
            message = f"provisioning failed, retrying: {error}"[:300]
        else:
            updated = await self._storages.update(doc["_id"], {"state": "ready", "message": None})
            return updated or doc
        return await self._storages.update(doc["_id"], {"message": message}) or doc

    def _claim(self, doc: StorageDoc) -> Manifest:
        return manifests.volume_claim(
            volume_namespace(doc), doc["tenant_id"], doc["storage_id"],
            size_bytes=doc["size_bytes"], storage_class=doc["storage_class"],
            access_mode=doc["access_mode"],
        )  # fmt: skip

    async def get(self, identity: Identity, storage_id: str) -> Storage:
        doc = await self._owned.get(identity, storage_id)
        return (await self._views([doc]))[0]

    async def page(self, identity: Identity, cursor: str | None, limit: int) -> StoragePage:
        tenant_id = identity.require_tenant()
        after = decode_cursor(cursor) if cursor else None
        seen = visible_match(identity, await self._tenants.get(tenant_id))
        docs = await self._storages.page(tenant_id, after=after, limit=limit + 1, where=seen)
        more = len(docs) > limit
        docs = docs[:limit]
        return StoragePage(
            items=await self._views(docs),
            next_cursor=encode_cursor(docs[-1]["_id"]) if more else None,
        )

    async def update(self, identity: Identity, storage_id: str, body: StorageUpdate) -> Storage:
        doc = await self._owned.ready(identity, storage_id)
        changes: Document = {}
        if body.name is not None:
            changes["name"] = body.name
        size = body.size_bytes
        if size is not None and size != doc["size_bytes"]:
            if doc["kind"] == "volume" and size < doc["size_bytes"]:
                raise ValidationFailed("a volume can only grow; create a smaller one and copy")
            tenant = await self._tenants.get(doc["tenant_id"])
            if tenant is None:
                raise TenantNotReady("the tenant is not provisioned yet", retry_after_s=2)
            await self._resize(tenant, doc, size, changes)
            doc = await self._storages.get(doc["_id"]) or doc
        elif changes:
            doc = await self._storages.update(doc["_id"], changes) or doc
        return (await self._views([doc]))[0]

    async def _resize(
        self, tenant: TenantDoc, doc: StorageDoc, size: int, changes: Document
    ) -> None:
        """Reserve and check in the tenant's quota turn, then apply and record: the
        reservation counts against the quota until the new size is written in the same
        update that drops it, so concurrent resizes cannot pass the quota together."""
        request_id = secrets.token_hex(8)
        async with self._storages.quota_turn(tenant["_id"]):
            await self._storages.reserve(doc["_id"], request_id, size)
            try:
                await self._check_tenant_quota(tenant, doc["storage_id"], size)
            except QuotaExceeded:
                await self._storages.unreserve(doc["_id"], request_id)
                raise
        applied = False
        try:
            if doc["kind"] == "object":
                await self._backend.set_quota(doc["bucket"], size)
            else:
                await self._resize_claim(doc, size)
            applied = True
        finally:
            fields = {**changes, "size_bytes": size} if applied else None
            # In the turn too: FerretDB writes a document as read, then write, so
            # this must not race another resize's reservation on the same storage.
            async with self._storages.quota_turn(tenant["_id"]):
                await self._storages.unreserve(doc["_id"], request_id, fields)

    async def _resize_claim(self, doc: StorageDoc, size: int) -> None:
        patch = {"spec": {"resources": {"requests": {"storage": str(size)}}}}
        try:
            await self._kube.patch(
                "PersistentVolumeClaim",
                volume_namespace(doc),
                storage_claim_name(doc["storage_id"]),
                patch,
            )
        except KubeError as error:
            if error.status in {403, 422}:
                # Kubernetes resizes only bound claims of classes that allow expansion.
                raise ResizeRefused(f"the volume cannot be resized now: {error}"[:500]) from error
            raise DependencyUnavailable(f"Kubernetes refused the resize: {error}") from error

    async def delete(self, identity: Identity, storage_id: str, *, force: bool) -> Storage | None:
        """None when the storage is gone; the storage (deleting) when it finishes later."""
        doc = await self._owned.get(identity, storage_id)
        if doc["state"] == "deleting":
            return self.view(doc)
        await self._refuse_if_attached(doc)
        if doc["kind"] == "object" and doc["state"] == "ready" and not force:
            # Checked before anything changes, so a refusal leaves the storage as it was.
            page = await self._backend.list_objects(
                doc["bucket"], prefix="", start_after=None, limit=1, delimiter=""
            )
            if page.objects or page.prefixes:
                raise StorageNotEmpty(
                    f"storage {storage_id!r} holds objects; delete them, or pass force=true"
                )
        doc = await self._storages.update(doc["_id"], {"state": "deleting", "force": force}) or doc
        try:
            # An attachment that slipped in between the check and the state change
            # saw `ready`; now that the state says deleting, no new one can.
            await self._refuse_if_attached(doc)
        except StorageAttached:
            await self._storages.update(doc["_id"], {"state": "ready"})
            raise
        if force and doc["kind"] == "object":
            # Emptying a bucket of 100,000 objects takes a while: finish in the background.
            self._teardown.spawn(doc)
            return self.view(doc)
        if await self._teardown.finish(doc):
            return None
        return self.view(await self._storages.get(doc["_id"]) or doc)

    async def _refuse_if_attached(self, doc: StorageDoc) -> None:
        users = [
            attachment["instance_id"]
            for attachment in await self._attachments.of_tenant(doc["tenant_id"])
            if doc["storage_id"] in attachment["storage_ids"]
        ]
        if users:
            raise StorageAttached(
                f"storage {doc['storage_id']!r} is attached to instances {', '.join(users)}; "
                "stop them first",
                instances=users,
            )

    async def _views(self, docs: list[StorageDoc]) -> list[Storage]:
        if not docs:
            return []
        usage = await self._storages.usage([doc["_id"] for doc in docs])
        attachments = await self._attachments.of_tenant(docs[0]["tenant_id"])
        tenant = await self._tenants.get(docs[0]["tenant_id"])
        return [
            self.view(
                doc,
                project=storage_project(doc, tenant),
                used_bytes=usage.get(doc["_id"]),
                attached_to=[
                    a["instance_id"] for a in attachments if doc["storage_id"] in a["storage_ids"]
                ],
            )
            for doc in docs
        ]

    def view(
        self,
        doc: StorageDoc,
        *,
        used_bytes: int | None = None,
        attached_to: list[str] | None = None,
        project: str | None = None,
    ) -> Storage:
        """The storage as the API shows it; `project`, the one it belongs to now
        (`storage_project`: a deleted project's storage is `default`'s), else as made."""
        is_object = doc["kind"] == "object"
        return Storage(
            storage_id=doc["storage_id"],
            tenant_id=doc["tenant_id"],
            name=doc.get("name"),
            kind=doc["kind"],
            state=doc["state"],
            message=doc.get("message"),
            size_bytes=doc["size_bytes"],
            used_bytes=used_bytes if is_object else doc["size_bytes"],
            bucket=doc.get("bucket"),
            endpoint=self._backend.public_endpoint if is_object else None,
            region=self._backend.region if is_object else None,
            claim_name=None if is_object else storage_claim_name(doc["storage_id"]),
            storage_class=doc.get("storage_class"),
            access_mode=doc.get("access_mode"),
            attached_to=attached_to or [],
            created_at=doc["created_at"],
            updated_at=doc["updated_at"],
            project=project or doc.get("project") or DEFAULT_PROJECT,
        )

    async def sweep(self) -> None:
        """Finish what a crash interrupted: creations and deletions."""
        for doc in await self._storages.unfinished(UNFINISHED_AFTER_S):
            if doc["state"] == "provisioning":
                await self._provision(doc)
            else:
                self._teardown.spawn(doc)


def _owning_project(identity: Identity, tenant: TenantDoc, body: StorageCreate) -> str:
    """The project a new storage belongs to: the one named (else `default`, or a project
    key's own), which the caller may act in (a 404 otherwise, as for a project that is
    not). A volume's claim is made in the project's namespace, where its pods run."""
    project = acting_project(identity, body.project)
    projects = tenant.get("projects") or {}
    if not may_act_in(projects, project, user_id=identity.subject, role=identity.role):
        raise unknown_project(project, identity.projects)
    return project
