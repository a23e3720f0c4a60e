"""Transfers: presigned downloads and uploads (single or multipart), and listing by prefix.

Bytes never pass through the service: it signs URLs the client uses against
the object store directly.
"""

from __future__ import annotations

import contextlib
import math
from datetime import timedelta
from typing import Literal

from gpucloud_libs.clock import now
from gpucloud_libs.errors import NotFound, QuotaExceeded, ValidationFailed
from gpucloud_libs.http import decode_cursor, encode_cursor
from gpucloud_libs.identity import Identity

from .backend import BackendError, InvalidPart, NoSuchUpload, ObjectBackend, UploadedPart
from .documents import StorageDoc, UploadDoc
from .ownership import OwnedStorages
from .presigners import Presigners
from .schemas import (
    MAX_PART_URLS,
    DownloadRequest,
    DownloadUrlsRequest,
    ObjectEntry,
    ObjectListing,
    ObjectUrl,
    ObjectUrls,
    PartUrl,
    PartUrls,
    PartUrlsRequest,
    PresignedUrl,
    UploadComplete,
    UploadPlan,
    UploadRequest,
    UploadUrlsRequest,
)
from .settings import StorageSettings
from .store import UploadStore

#: S3 allows 10,000 parts; a plan lists at most this many URLs, so large objects
#: get larger parts rather than a longer answer.
MAX_PLANNED_PARTS = MAX_PART_URLS
MAX_PART_BYTES = 5 * 1024**3


def _within_quota(doc: StorageDoc, size_bytes: int, what: str) -> None:
    if size_bytes > doc["size_bytes"]:
        raise QuotaExceeded(
            f"{what} ({size_bytes} bytes) would not fit the storage's quota "
            f"({doc['size_bytes']} bytes)"
        )


def part_size(size_bytes: int, floor: int) -> int:
    """The part size for an object: the floor, or larger so it fits MAX_PLANNED_PARTS."""
    mib = 1024 * 1024
    needed = math.ceil(size_bytes / MAX_PLANNED_PARTS / mib) * mib
    return max(floor, needed)


class Transfers:
    def __init__(
        self,
        settings: StorageSettings,
        backend: ObjectBackend,
        uploads: UploadStore,
        owned: OwnedStorages,
        presigners: Presigners,
    ) -> None:
        self._settings = settings
        self._backend = backend
        self._uploads = uploads
        self._owned = owned
        self._presigners = presigners

    async def presign_download(
        self, identity: Identity, storage_id: str, body: DownloadRequest
    ) -> PresignedUrl:
        doc = await self._owned.ready(identity, storage_id, kind="object")
        return PresignedUrl(
            method="GET",
            url=self._backend.presign_get(
                await self._presigners.signer(doc), doc["bucket"], body.key, body.expires_in_s
            ),
            expires_at=now() + timedelta(seconds=body.expires_in_s),
        )

    async def presign_downloads(
        self, identity: Identity, storage_id: str, body: DownloadUrlsRequest
    ) -> ObjectUrls:
        doc = await self._owned.ready(identity, storage_id, kind="object")
        return await self._object_urls(doc, "GET", body.keys, body.expires_in_s)

    async def presign_uploads(
        self, identity: Identity, storage_id: str, body: UploadUrlsRequest
    ) -> ObjectUrls:
        doc = await self._owned.ready(identity, storage_id, kind="object")
        floor = self._settings.multipart_part_bytes
        if too_big := next((o.key for o in body.objects if o.size_bytes > floor), None):
            raise ValidationFailed(
                f"{too_big!r} is larger than one part ({floor} bytes): plan it alone with "
                "POST /storages/{storageID}/uploads"
            )
        _within_quota(doc, sum(o.size_bytes for o in body.objects), "the objects")
        keys = [o.key for o in body.objects]
        return await self._object_urls(doc, "PUT", keys, body.expires_in_s)

    async def _object_urls(
        self, doc: StorageDoc, method: Literal["GET", "PUT"], keys: list[str], expires_in_s: int
    ) -> ObjectUrls:
        signer = await self._presigners.signer(doc)
        sign = self._backend.presign_get if method == "GET" else self._backend.presign_put
        return ObjectUrls(
            method=method,
            expires_at=now() + timedelta(seconds=expires_in_s),
            urls=[
                ObjectUrl(key=key, url=sign(signer, doc["bucket"], key, expires_in_s))
                for key in keys
            ],
        )

    async def plan_upload(
        self, identity: Identity, storage_id: str, body: UploadRequest
    ) -> UploadPlan:
        doc = await self._owned.ready(identity, storage_id, kind="object")
        if body.size_bytes is not None:
            _within_quota(doc, body.size_bytes, "the object")
        expires_at = now() + timedelta(seconds=body.expires_in_s)
        floor = self._settings.multipart_part_bytes
        signer = await self._presigners.signer(doc)
        if body.size_bytes is None or body.size_bytes <= floor:
            url = self._backend.presign_put(signer, doc["bucket"], body.key, body.expires_in_s)
            return UploadPlan(key=body.key, expires_at=expires_at, url=url)
        size = part_size(body.size_bytes, floor)
        if size > MAX_PART_BYTES:
            raise ValidationFailed("the object is too large for one multipart upload")
        upload_id = await self._backend.start_multipart(doc["bucket"], body.key)
        await self._uploads.insert(
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
                url=self._backend.presign_part(
                    signer, doc["bucket"], body.key, upload_id, number, body.expires_in_s
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
    ) -> tuple[StorageDoc, UploadDoc]:
        doc = await self._owned.ready(identity, storage_id, kind="object")
        upload = await self._uploads.get(upload_id)
        if (
            upload is None
            or upload["tenant_id"] != doc["tenant_id"]
            or upload["storage_id"] != storage_id
        ):
            raise NotFound(f"upload {upload_id!r} not found")
        return doc, upload

    async def presign_parts(
        self, identity: Identity, storage_id: str, upload_id: str, body: PartUrlsRequest
    ) -> PartUrls:
        """Fresh URLs for parts of a planned upload, so that an interrupted upload goes on
        with the parts it still lacks once its first URLs have expired."""
        doc, upload = await self._upload(identity, storage_id, upload_id)
        signer = await self._presigners.signer(doc)
        return PartUrls(
            key=upload["key"],
            upload_id=upload_id,
            expires_at=now() + timedelta(seconds=body.expires_in_s),
            parts=[
                PartUrl(
                    part_number=number,
                    url=self._backend.presign_part(
                        signer, doc["bucket"], upload["key"], upload_id, number, body.expires_in_s
                    ),
                )
                for number in sorted(set(body.part_numbers))
            ],
        )

    async def revoke_urls(self, identity: Identity, storage_id: str) -> None:
        """Void every presigned URL of the storage made so far."""
        doc = await self._owned.ready(identity, storage_id, kind="object")
        await self._presigners.revoke(doc)

    async def complete_upload(
        self, identity: Identity, storage_id: str, upload_id: str, body: UploadComplete
    ) -> ObjectEntry:
        doc, upload = await self._upload(identity, storage_id, upload_id)
        parts = [UploadedPart(part.part_number, part.etag.strip('"')) for part in body.parts]
        if [part.part_number for part in parts] != sorted({part.part_number for part in parts}):
            raise ValidationFailed("parts must be listed once each, in ascending partNumber")
        try:
            await self._backend.complete_multipart(doc["bucket"], upload["key"], upload_id, parts)
        except InvalidPart as error:
            raise ValidationFailed(f"the object store refused the parts: {error}") from error
        except NoSuchUpload as error:
            await self._uploads.remove(upload_id)
            raise NotFound(f"upload {upload_id!r} no longer exists") from error
        except BackendError as error:
            if error.code == "XMinioAdminBucketQuotaExceeded":
                raise QuotaExceeded("the storage's quota is reached") from error
            raise
        await self._uploads.remove(upload_id)
        info = await self._backend.head_object(doc["bucket"], upload["key"])
        if info is None:
            raise NotFound(f"object {upload['key']!r} vanished after its upload")
        return ObjectEntry(
            key=info.key, size_bytes=info.size, etag=info.etag, last_modified=info.last_modified
        )

    async def abort_upload(self, identity: Identity, storage_id: str, upload_id: str) -> None:
        doc, upload = await self._upload(identity, storage_id, upload_id)
        with contextlib.suppress(NoSuchUpload):  # already gone: the goal is reached
            await self._backend.abort_multipart(doc["bucket"], upload["key"], upload_id)
        await self._uploads.remove(upload_id)

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
        doc = await self._owned.ready(identity, storage_id, kind="object")
        page = await self._backend.list_objects(
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
