"""What the storage API does: storages, accessors, transfers and attachments.

Every call is scoped by the caller's tenant, from the signed identity; a
storage of another tenant does not exist (404). A storage document is written
before anything is made in the backend, so a crash leaves a record the sweep
can finish (provisioning) or undo (deleting).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import secrets
import string
from datetime import datetime, timedelta

from faststream.kafka import KafkaBroker

from gpucloud_libs.errors import (
    Conflict,
    DependencyUnavailable,
    Forbidden,
    NotFound,
    QuotaExceeded,
    TenantNotReady,
    ValidationFailed,
)
from gpucloud_libs.events import StorageUsageSampled, TenantUpserted
from gpucloud_libs.http import decode_cursor, encode_cursor
from gpucloud_libs.identity import Identity
from gpucloud_libs.kafka import publish_event
from gpucloud_libs.kube import KubeClient, KubeError, NotFoundError
from gpucloud_libs.mongo import Document
from gpucloud_libs.naming import (
    storage_claim_name,
    storage_env_prefix,
    storage_secret_name,
    tenant_namespace,
)
from gpucloud_libs.topics import STORAGE_USAGE

from . import manifests
from .backend import (
    AccessMode,
    BackendError,
    BucketNotEmpty,
    InvalidPart,
    NoSuchUpload,
    ObjectBackend,
    UploadedPart,
)
from .schemas import (
    Accessor,
    AccessorCreate,
    AccessorCreated,
    AttachedStorage,
    AttachmentPlan,
    AttachmentRequest,
    DownloadRequest,
    ObjectEntry,
    ObjectListing,
    PartUrl,
    PresignedUrl,
    Storage,
    StorageCreate,
    StoragePage,
    StorageUpdate,
    UploadComplete,
    UploadPlan,
    UploadRequest,
)
from .settings import StorageSettings
from .store import (
    AccessorStore,
    AttachmentStore,
    StorageStore,
    TenantStore,
    UploadStore,
    now,
    storage_key,
)

log = logging.getLogger(__name__)

#: The identity subject the instances service signs its attachment calls with.
INSTANCES_SERVICE = "service:instances"
#: S3 allows 10,000 parts; a plan lists at most this many URLs, so large objects
#: get larger parts rather than a longer answer.
MAX_PLANNED_PARTS = 1000
MAX_PART_BYTES = 5 * 1024**3
#: MinIO's bounds for a service account's expiry (RGW has none; same rule for both).
MIN_ACCESSOR_LIFETIME = timedelta(minutes=15)
MAX_ACCESSOR_LIFETIME = timedelta(days=365)
#: A storage this long in provisioning or deleting was left by a crash.
UNFINISHED_AFTER_S = 10.0
_KEY_ALPHABET = string.ascii_uppercase + string.digits


class StorageNotReady(Conflict):
    code = "storage_not_ready"
    title = "Storage not ready"


class StorageAttached(Conflict):
    code = "storage_attached"
    title = "Storage attached to instances"


class ResizeRefused(Conflict):
    code = "resize_refused"
    title = "Volume cannot be resized"


class StorageNotEmpty(Conflict):
    code = "storage_not_empty"
    title = "Storage not empty"


def _access_key() -> str:
    """20 characters, like an AWS access key id; it doubles as the accessor's id."""
    return "GPC" + "".join(secrets.choice(_KEY_ALPHABET) for _ in range(17))


def part_size(size_bytes: int, floor: int) -> int:
    """The part size for an object: the floor, or larger so it fits MAX_PLANNED_PARTS."""
    mib = 1024 * 1024
    needed = math.ceil(size_bytes / MAX_PLANNED_PARTS / mib) * mib
    return max(floor, needed)


class StorageService:
    def __init__(
        self,
        settings: StorageSettings,
        backend: ObjectBackend,
        kube: KubeClient,
        broker: KafkaBroker,
        tenants: TenantStore,
        storages: StorageStore,
        accessors: AccessorStore,
        uploads: UploadStore,
        attachments: AttachmentStore,
    ) -> None:
        self.settings = settings
        self.backend = backend
        self.kube = kube
        self.broker = broker
        self.tenants = tenants
        self.storages = storages
        self.accessors = accessors
        self.uploads = uploads
        self.attachments = attachments
        self.source = "/gpucloud/storage"
        self._background: set[asyncio.Task[bool]] = set()
        self._deleting: set[str] = set()  # storage keys being deleted by this process

    # --- storages ----------------------------------------------------------------

    async def create_storage(self, identity: Identity, body: StorageCreate) -> Storage:
        tenant_id = identity.require_tenant()
        tenant = await self.tenants.get(tenant_id)
        if tenant is None:
            raise TenantNotReady(
                "the tenant is not provisioned in the storage service yet; retry shortly",
                retry_after_s=2,
            )
        if tenant.get("status") != "active":
            raise Forbidden("the tenant is suspended")
        if body.kind == "object" and body.storage_class is not None:
            raise ValidationFailed("storageClass applies to volume storages only")
        storage_id = body.storage_id or f"s-{secrets.token_hex(6)}"
        key = storage_key(tenant_id, storage_id)
        created = now()
        doc: Document = {
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
        }
        if body.kind == "object":
            # Bucket names are global and at most 63 characters: not derived from ids.
            doc["bucket"] = f"gpc-{secrets.token_hex(12)}"
        else:
            doc["storage_class"] = body.storage_class or self.settings.default_storage_class
            doc["access_mode"] = body.access_mode
        if not await self.storages.insert(doc):
            raise Conflict(f"a storage with the id {storage_id!r} already exists")
        # Counted with this one included: of two racing creates, not both pass.
        try:
            await self._check_tenant_quota(tenant, storage_id, body.size_bytes)
        except QuotaExceeded:
            await self.storages.remove(key)
            raise
        return self.view(await self._provision(doc))

    async def _check_tenant_quota(self, tenant: Document, storage_id: str, size: int) -> None:
        limit = tenant["max_storage_bytes"]
        others = sum(
            doc["size_bytes"]
            for doc in await self.storages.of_tenant(tenant["_id"])
            if doc["storage_id"] != storage_id
        )
        if others + size > limit:
            raise QuotaExceeded(
                f"the tenant's storage quota is {limit} bytes; {others} are allocated "
                f"and this asks for {size}",
                limit_bytes=limit,
                allocated_bytes=others,
            )

    async def _provision(self, doc: Document) -> Document:
        """Make the bucket or claim; on a transient failure the sweep tries again."""
        try:
            if doc["kind"] == "object":
                await self.backend.create_bucket(doc["bucket"], doc["size_bytes"])
            else:
                await self.kube.ensure(self._claim(doc))
        except NotFoundError:
            message = "waiting for the tenant's namespace"
        except (BackendError, KubeError, DependencyUnavailable) as error:
            log.warning("provisioning failed", extra={"storage": doc["_id"], "error": str(error)})
            message = f"provisioning failed, retrying: {error}"[:300]
        else:
            updated = await self.storages.update(doc["_id"], {"state": "ready", "message": None})
            return updated or doc
        return await self.storages.update(doc["_id"], {"message": message}) or doc

    def _claim(self, doc: Document) -> Document:
        return manifests.volume_claim(
            tenant_namespace(doc["tenant_id"]), doc["tenant_id"], doc["storage_id"],
            size_bytes=doc["size_bytes"], storage_class=doc["storage_class"],
            access_mode=doc["access_mode"],
        )  # fmt: skip

    async def _owned(self, identity: Identity, storage_id: str) -> Document:
        doc = await self.storages.get(storage_key(identity.require_tenant(), storage_id))
        if doc is None:
            raise NotFound(f"storage {storage_id!r} not found")
        return doc

    async def _ready(
        self, identity: Identity, storage_id: str, kind: str | None = None
    ) -> Document:
        doc = await self._owned(identity, storage_id)
        if kind is not None and doc["kind"] != kind:
            raise ValidationFailed(
                f"storage {storage_id!r} is a {doc['kind']} storage; this needs an {kind} storage"
            )
        if doc["state"] != "ready":
            raise StorageNotReady(
                f"storage {storage_id!r} is {doc['state']}", state=doc["state"], retry_after_s=2
            )
        return doc

    async def get_storage(self, identity: Identity, storage_id: str) -> Storage:
        doc = await self._owned(identity, storage_id)
        return (await self._views([doc]))[0]

    async def list_storages(
        self, identity: Identity, cursor: str | None, limit: int
    ) -> StoragePage:
        tenant_id = identity.require_tenant()
        after = decode_cursor(cursor) if cursor else None
        docs = await self.storages.page(tenant_id, after=after, limit=limit + 1)
        more = len(docs) > limit
        docs = docs[:limit]
        return StoragePage(
            items=await self._views(docs),
            next_cursor=encode_cursor(docs[-1]["_id"]) if more else None,
        )

    async def update_storage(
        self, identity: Identity, storage_id: str, body: StorageUpdate
    ) -> Storage:
        doc = await self._ready(identity, storage_id)
        changes: Document = {}
        if body.name is not None:
            changes["name"] = body.name
        size = body.size_bytes
        if size is not None and size != doc["size_bytes"]:
            if doc["kind"] == "volume" and size < doc["size_bytes"]:
                raise ValidationFailed("a volume can only grow; create a smaller one and copy")
            tenant = await self.tenants.get(doc["tenant_id"])
            if tenant is None:
                raise TenantNotReady("the tenant is not provisioned yet", retry_after_s=2)
            await self._check_tenant_quota(tenant, storage_id, size)
            if doc["kind"] == "object":
                await self.backend.set_quota(doc["bucket"], size)
            else:
                await self._resize_claim(doc, size)
            changes["size_bytes"] = size
        if changes:
            doc = await self.storages.update(doc["_id"], changes) or doc
        return (await self._views([doc]))[0]

    async def _resize_claim(self, doc: Document, size: int) -> None:
        patch = {"spec": {"resources": {"requests": {"storage": str(size)}}}}
        try:
            await self.kube.patch(
                "PersistentVolumeClaim",
                tenant_namespace(doc["tenant_id"]),
                storage_claim_name(doc["storage_id"]),
                patch,
            )
        except KubeError as error:
            if error.status in {403, 422}:
                # Kubernetes resizes only bound claims of classes that allow expansion.
                raise ResizeRefused(f"the volume cannot be resized now: {error}"[:500]) from error
            raise DependencyUnavailable(f"Kubernetes refused the resize: {error}") from error

    async def delete_storage(
        self, identity: Identity, storage_id: str, *, force: bool
    ) -> Storage | None:
        """None when the storage is gone; the storage (deleting) when it finishes later."""
        doc = await self._owned(identity, storage_id)
        if doc["state"] == "deleting":
            return self.view(doc)
        await self._refuse_if_attached(doc)
        if doc["kind"] == "object" and doc["state"] == "ready" and not force:
            # Checked before anything changes, so a refusal leaves the storage as it was.
            page = await self.backend.list_objects(
                doc["bucket"], prefix="", start_after=None, limit=1, delimiter=""
            )
            if page.objects or page.prefixes:
                raise StorageNotEmpty(
                    f"storage {storage_id!r} holds objects; delete them, or pass force=true"
                )
        doc = await self.storages.update(doc["_id"], {"state": "deleting", "force": force}) or doc
        try:
            # An attachment that slipped in between the check and the state change
            # saw `ready`; now that the state says deleting, no new one can.
            await self._refuse_if_attached(doc)
        except StorageAttached:
            await self.storages.update(doc["_id"], {"state": "ready"})
            raise
        if force and doc["kind"] == "object":
            # Emptying a bucket of 100,000 objects takes a while: finish in the background.
            self._spawn_delete(doc)
            return self.view(doc)
        if await self.finish_delete(doc):
            return None
        return self.view(await self.storages.get(doc["_id"]) or doc)

    async def _refuse_if_attached(self, doc: Document) -> None:
        users = [
            attachment["instance_id"]
            for attachment in await self.attachments.of_tenant(doc["tenant_id"])
            if doc["storage_id"] in attachment["storage_ids"]
        ]
        if users:
            raise StorageAttached(
                f"storage {doc['storage_id']!r} is attached to instances {', '.join(users)}; "
                "stop them first",
                instances=users,
            )

    async def finish_delete(self, doc: Document) -> bool:
        """Remove the backend side, revoke accessors, publish the last sample, forget it.

        False when something failed on the way: the storage stays `deleting` and
        the sweep tries again (every step is idempotent).
        """
        try:
            if doc["kind"] == "object":
                for accessor in await self.accessors.of_storage(
                    doc["tenant_id"], doc["storage_id"]
                ):
                    await self.backend.revoke_credential(accessor["_id"])
                    await self.accessors.remove(accessor["_id"])
                await self.backend.delete_bucket(doc["bucket"], force=bool(doc.get("force")))
            else:
                await self.kube.delete(
                    "PersistentVolumeClaim",
                    tenant_namespace(doc["tenant_id"]),
                    storage_claim_name(doc["storage_id"]),
                )
            # Metering bills up to the last sample: a zero closes the storage's meter.
            await self._publish_usage(doc, 0, now())
        except BucketNotEmpty:
            await self.storages.update(doc["_id"], {"state": "ready", "message": None})
            raise StorageNotEmpty(
                f"storage {doc['storage_id']!r} holds objects; delete them, or pass force=true"
            ) from None
        except Exception as error:  # Kafka's errors too: anything is retried by the sweep
            log.warning("deletion failed", extra={"storage": doc["_id"], "error": str(error)})
            await self.storages.update(doc["_id"], {"message": f"deletion retrying: {error}"[:300]})
            return False
        await self.storages.remove(doc["_id"])
        log.info("storage deleted", extra={"storage": doc["_id"]})
        return True

    def _spawn_delete(self, doc: Document) -> None:
        """Finish a deletion in the background; the sweep leaves it alone meanwhile."""
        if doc["_id"] in self._deleting:
            return
        self._deleting.add(doc["_id"])
        task = asyncio.ensure_future(self.finish_delete(doc))
        self._background.add(task)

        def done(finished: asyncio.Task[bool]) -> None:
            self._background.discard(finished)
            self._deleting.discard(doc["_id"])

        task.add_done_callback(done)

    async def close(self) -> None:
        for task in list(self._background):
            task.cancel()

    async def _views(self, docs: list[Document]) -> list[Storage]:
        if not docs:
            return []
        usage = await self.storages.usage([doc["_id"] for doc in docs])
        attachments = await self.attachments.of_tenant(docs[0]["tenant_id"])
        return [
            self.view(
                doc,
                used_bytes=usage.get(doc["_id"]),
                attached_to=[
                    a["instance_id"] for a in attachments if doc["storage_id"] in a["storage_ids"]
                ],
            )
            for doc in docs
        ]

    def view(
        self, doc: Document, *, used_bytes: int | None = None, attached_to: list[str] | None = None
    ) -> Storage:
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
            endpoint=self.backend.public_endpoint if is_object else None,
            region=self.backend.region if is_object else None,
            claim_name=None if is_object else storage_claim_name(doc["storage_id"]),
            storage_class=doc.get("storage_class"),
            access_mode=doc.get("access_mode"),
            attached_to=attached_to or [],
            created_at=doc["created_at"],
            updated_at=doc["updated_at"],
        )

    # --- accessors ---------------------------------------------------------------

    async def create_accessor(
        self, identity: Identity, storage_id: str, body: AccessorCreate
    ) -> AccessorCreated:
        doc = await self._ready(identity, storage_id, kind="object")
        if body.expires_at is not None:
            lifetime = body.expires_at - now()
            if not MIN_ACCESSOR_LIFETIME <= lifetime <= MAX_ACCESSOR_LIFETIME:
                raise ValidationFailed("expiresAt must be between 15 minutes and a year ahead")
        accessor, secret = await self._new_accessor(
            doc, body.mode, expires_at=body.expires_at, name=body.name, instance_id=None,
            created_by=identity.subject,
        )  # fmt: skip
        return AccessorCreated(
            **self._accessor_view(accessor).model_dump(),
            secret_access_key=secret,
            endpoint=self.backend.public_endpoint,
            region=self.backend.region,
            bucket=doc["bucket"],
        )

    async def _new_accessor(
        self,
        storage: Document,
        mode: AccessMode,
        *,
        expires_at: datetime | None,
        name: str | None,
        instance_id: str | None,
        created_by: str,
    ) -> tuple[Document, str]:
        access_key, secret = _access_key(), secrets.token_urlsafe(30)
        accessor: Document = {
            "_id": access_key,
            "tenant_id": storage["tenant_id"],
            "storage_id": storage["storage_id"],
            "name": name,
            "mode": mode,
            "expires_at": expires_at,
            "instance_id": instance_id,
            "created_by": created_by,
            "created_at": now(),
        }
        # Recorded first: whatever the backend did, the record lets a delete revoke it.
        await self.accessors.insert(accessor)
        try:
            await self.backend.create_credential(
                access_key=access_key, secret_key=secret, bucket=storage["bucket"], mode=mode,
                expires_at=expires_at,
                description=f"gpucloud {storage['tenant_id']}/{storage['storage_id']}",
            )  # fmt: skip
        except BaseException:
            await self.accessors.remove(access_key)
            raise
        return accessor, secret

    @staticmethod
    def _accessor_view(doc: Document) -> Accessor:
        return Accessor(
            accessor_id=doc["_id"],
            storage_id=doc["storage_id"],
            name=doc.get("name"),
            mode=doc["mode"],
            expires_at=doc.get("expires_at"),
            instance_id=doc.get("instance_id"),
            created_at=doc["created_at"],
        )

    async def list_accessors(self, identity: Identity, storage_id: str) -> list[Accessor]:
        doc = await self._owned(identity, storage_id)
        found = await self.accessors.of_storage(doc["tenant_id"], storage_id)
        return [self._accessor_view(accessor) for accessor in found]

    async def delete_accessor(self, identity: Identity, storage_id: str, accessor_id: str) -> None:
        doc = await self._owned(identity, storage_id)
        accessor = await self.accessors.get(accessor_id)
        if (
            accessor is None
            or accessor["tenant_id"] != doc["tenant_id"]
            or accessor["storage_id"] != storage_id
        ):
            raise NotFound(f"accessor {accessor_id!r} not found")
        if accessor.get("instance_id"):
            raise Conflict(
                f"accessor {accessor_id!r} belongs to instance {accessor['instance_id']!r}; "
                "it is revoked when the instance stops"
            )
        await self.backend.revoke_credential(accessor_id)
        await self.accessors.remove(accessor_id)

    # --- transfers ---------------------------------------------------------------

    async def presign_download(
        self, identity: Identity, storage_id: str, body: DownloadRequest
    ) -> PresignedUrl:
        doc = await self._ready(identity, storage_id, kind="object")
        return PresignedUrl(
            method="GET",
            url=self.backend.presign_get(doc["bucket"], body.key, body.expires_in_s),
            expires_at=now() + timedelta(seconds=body.expires_in_s),
        )

    async def plan_upload(
        self, identity: Identity, storage_id: str, body: UploadRequest
    ) -> UploadPlan:
        doc = await self._ready(identity, storage_id, kind="object")
        if body.size_bytes is not None and body.size_bytes > doc["size_bytes"]:
            raise QuotaExceeded(
                f"the object ({body.size_bytes} bytes) is larger than the storage's quota "
                f"({doc['size_bytes']} bytes)"
            )
        expires_at = now() + timedelta(seconds=body.expires_in_s)
        floor = self.settings.multipart_part_bytes
        if body.size_bytes is None or body.size_bytes <= floor:
            url = self.backend.presign_put(doc["bucket"], body.key, body.expires_in_s)
            return UploadPlan(key=body.key, expires_at=expires_at, url=url)
        size = part_size(body.size_bytes, floor)
        if size > MAX_PART_BYTES:
            raise ValidationFailed("the object is too large for one multipart upload")
        upload_id = await self.backend.start_multipart(doc["bucket"], body.key)
        await self.uploads.insert(
            {
                "_id": upload_id,
                "tenant_id": doc["tenant_id"],
                "storage_id": storage_id,
                "key": body.key,
                "created_at": now(),
            }
        )
        count = math.ceil(body.size_bytes / size)
        parts = [
            PartUrl(
                part_number=number,
                url=self.backend.presign_part(
                    doc["bucket"], body.key, upload_id, number, body.expires_in_s
                ),
            )
            for number in range(1, count + 1)
        ]
        return UploadPlan(
            key=body.key, expires_at=expires_at, upload_id=upload_id, part_size_bytes=size,
            parts=parts,
        )  # fmt: skip

    async def _upload(
        self, identity: Identity, storage_id: str, upload_id: str
    ) -> tuple[Document, Document]:
        doc = await self._ready(identity, storage_id, kind="object")
        upload = await self.uploads.get(upload_id)
        if (
            upload is None
            or upload["tenant_id"] != doc["tenant_id"]
            or upload["storage_id"] != storage_id
        ):
            raise NotFound(f"upload {upload_id!r} not found")
        return doc, upload

    async def complete_upload(
        self, identity: Identity, storage_id: str, upload_id: str, body: UploadComplete
    ) -> ObjectEntry:
        doc, upload = await self._upload(identity, storage_id, upload_id)
        parts = [UploadedPart(part.part_number, part.etag.strip('"')) for part in body.parts]
        if [part.part_number for part in parts] != sorted({part.part_number for part in parts}):
            raise ValidationFailed("parts must be listed once each, in ascending partNumber")
        try:
            await self.backend.complete_multipart(doc["bucket"], upload["key"], upload_id, parts)
        except InvalidPart as error:
            raise ValidationFailed(f"the object store refused the parts: {error}") from error
        except NoSuchUpload as error:
            await self.uploads.remove(upload_id)
            raise NotFound(f"upload {upload_id!r} no longer exists") from error
        except BackendError as error:
            if error.code == "XMinioAdminBucketQuotaExceeded":
                raise QuotaExceeded("the storage's quota is reached") from error
            raise
        await self.uploads.remove(upload_id)
        info = await self.backend.head_object(doc["bucket"], upload["key"])
        if info is None:
            raise NotFound(f"object {upload['key']!r} vanished after its upload")
        return ObjectEntry(
            key=info.key, size_bytes=info.size, etag=info.etag, last_modified=info.last_modified
        )

    async def abort_upload(self, identity: Identity, storage_id: str, upload_id: str) -> None:
        doc, upload = await self._upload(identity, storage_id, upload_id)
        with contextlib.suppress(NoSuchUpload):  # already gone: the goal is reached
            await self.backend.abort_multipart(doc["bucket"], upload["key"], upload_id)
        await self.uploads.remove(upload_id)

    async def list_objects(
        self,
        identity: Identity,
        storage_id: str,
        *,
        prefix: str,
        delimiter: str,
        cursor: str | None,
        limit: int,
    ) -> ObjectListing:
        doc = await self._ready(identity, storage_id, kind="object")
        page = await self.backend.list_objects(
            doc["bucket"], prefix=prefix, delimiter=delimiter, limit=limit,
            start_after=decode_cursor(cursor) if cursor else None,
        )  # fmt: skip
        return ObjectListing(
            objects=[
                ObjectEntry(
                    key=obj.key, size_bytes=obj.size, etag=obj.etag, last_modified=obj.last_modified
                )
                for obj in page.objects
            ],
            prefixes=page.prefixes,
            next_cursor=encode_cursor(page.next_start_after) if page.next_start_after else None,
        )

    # --- attachments (the instances service) ------------------------------------

    async def attach(
        self, identity: Identity, instance_id: str, body: AttachmentRequest
    ) -> AttachmentPlan:
        """What an instance mounts and loads, made once per instance (retries return it)."""
        if identity.subject != INSTANCES_SERVICE:
            raise Forbidden("attachments are made by the instances service")
        tenant_id = identity.require_tenant()
        key = storage_key(tenant_id, instance_id)
        existing = await self.attachments.get(key)
        if existing is not None:
            if await self._secrets_present(existing):
                return self._plan(existing)
            # An earlier attempt died half-way: undo it and start over.
            await self.release(tenant_id, instance_id)
        wanted = {item.storage_id: item for item in body.storages}
        storages = [await self._ready(identity, storage_id) for storage_id in wanted]
        attachment: Document = {
            "_id": key,
            "tenant_id": tenant_id,
            "instance_id": instance_id,
            "storage_ids": list(wanted),
            "items": [
                {
                    "storage_id": doc["storage_id"],
                    "kind": doc["kind"],
                    "read_only": wanted[doc["storage_id"]].read_only,
                }
                for doc in storages
            ],
            "accessor_ids": [],
            "created_at": now(),
        }
        if not await self.attachments.insert(attachment):
            raise Conflict("a concurrent call is attaching this instance's storages; retry")
        try:
            for doc in storages:
                # A delete that began after our check now sees this attachment; one
                # that began before it shows here as `deleting`.
                fresh = await self.storages.get(doc["_id"])
                if fresh is None or fresh["state"] != "ready":
                    raise StorageNotReady(f"storage {doc['storage_id']!r} is being deleted")
                if doc["kind"] == "object":
                    await self._grant_instance(
                        doc, instance_id, wanted[doc["storage_id"]].read_only
                    )
        except BaseException:
            await self.release(tenant_id, instance_id)
            raise
        return self._plan(attachment)

    async def _grant_instance(self, storage: Document, instance_id: str, read_only: bool) -> None:
        accessor, secret = await self._new_accessor(
            storage, "read-only" if read_only else "read-write", expires_at=None, name=None,
            instance_id=instance_id, created_by=INSTANCES_SERVICE,
        )  # fmt: skip
        variables = {
            "AWS_ACCESS_KEY_ID": accessor["_id"],
            "AWS_SECRET_ACCESS_KEY": secret,
            "AWS_ENDPOINT_URL": self.backend.public_endpoint,
            "AWS_REGION": self.backend.region,
            "BUCKET": storage["bucket"],
        }
        await self.kube.ensure(
            manifests.credentials_secret(
                tenant_namespace(storage["tenant_id"]), storage["tenant_id"],
                storage["storage_id"], instance_id, variables,
            )
        )  # fmt: skip

    async def _secrets_present(self, attachment: Document) -> bool:
        for item in attachment["items"]:
            if item["kind"] != "object":
                continue
            try:
                await self.kube.read(
                    "Secret",
                    tenant_namespace(attachment["tenant_id"]),
                    storage_secret_name(item["storage_id"], attachment["instance_id"]),
                )
            except NotFoundError:
                return False
        return True

    @staticmethod
    def _plan(attachment: Document) -> AttachmentPlan:
        instance_id = attachment["instance_id"]
        return AttachmentPlan(
            instance_id=instance_id,
            storages=[
                AttachedStorage(
                    storage_id=item["storage_id"],
                    kind=item["kind"],
                    claim_name=storage_claim_name(item["storage_id"])
                    if item["kind"] == "volume"
                    else None,
                    secret_name=storage_secret_name(item["storage_id"], instance_id)
                    if item["kind"] == "object"
                    else None,
                    env_prefix=storage_env_prefix(item["storage_id"])
                    if item["kind"] == "object"
                    else None,
                )
                for item in attachment["items"]
            ],
        )

    async def release_ended(self, instances: list[tuple[str, str]]) -> None:
        """Release the storages of instances that ended (tenant, instance pairs)."""
        keys = {
            storage_key(tenant_id, instance_id): (tenant_id, instance_id)
            for tenant_id, instance_id in instances
        }
        for key in await self.attachments.existing(list(keys)):
            await self.release(*keys[key])

    async def release(self, tenant_id: str, instance_id: str) -> None:
        """Revoke what an instance was given and forget its attachment (idempotent)."""
        key = storage_key(tenant_id, instance_id)
        attachment = await self.attachments.get(key)
        if attachment is None:
            return
        namespace = tenant_namespace(tenant_id)
        for storage_id in attachment["storage_ids"]:
            for accessor in await self.accessors.of_storage(tenant_id, storage_id):
                if accessor.get("instance_id") == instance_id:
                    await self.backend.revoke_credential(accessor["_id"])
                    await self.accessors.remove(accessor["_id"])
            await self.kube.delete(
                "Secret", namespace, storage_secret_name(storage_id, instance_id)
            )
        await self.attachments.remove(key)
        log.info("storages released", extra={"tenant": tenant_id, "instance": instance_id})

    # --- tenants, usage and the sweep ---------------------------------------------

    async def apply_tenant(self, tenant: TenantUpserted) -> None:
        await self.tenants.upsert(
            tenant.tenant_id,
            {"status": tenant.status, "max_storage_bytes": tenant.quota.max_storage_bytes},
        )

    async def delete_tenant(self, tenant_id: str) -> None:
        """A deleted tenant's storages go with it, objects included (in the background:
        emptying buckets must not hold up the tenant events behind this one)."""
        for attachment in await self.attachments.of_tenant(tenant_id):
            await self.release(tenant_id, attachment["instance_id"])
        for doc in await self.storages.of_tenant(tenant_id):
            deleting = doc
            if doc["state"] != "deleting":
                changes = {"state": "deleting", "force": True}
                deleting = await self.storages.update(doc["_id"], changes) or doc
            self._spawn_delete(deleting)
        await self.tenants.remove(tenant_id)

    async def sample_usage(self) -> int:
        """Publish bytes stored per ready storage; returns how many were sampled."""
        by_bucket = await self.backend.bucket_usage()
        at = now()
        sampled = 0
        for doc in await self.storages.in_state("ready"):
            used = by_bucket.get(doc["bucket"], 0) if doc["kind"] == "object" else doc["size_bytes"]
            await self._publish_usage(doc, used, at)
            if doc["kind"] == "object":
                await self.storages.record_usage(doc["_id"], used, at)
            sampled += 1
        return sampled

    async def _publish_usage(self, doc: Document, used: int, at: datetime) -> None:
        await publish_event(
            self.broker, STORAGE_USAGE,
            StorageUsageSampled(
                storage_id=doc["storage_id"], tenant_id=doc["tenant_id"], kind=doc["kind"],
                bytes_used=used, at=at,
            ),
            source=self.source,
        )  # fmt: skip

    async def sweep(self) -> None:
        """Finish what a crash interrupted: creations and deletions."""
        for doc in await self.storages.unfinished(UNFINISHED_AFTER_S):
            if doc["state"] == "provisioning":
                await self._provision(doc)
            else:
                self._spawn_delete(doc)
