"""The S3 half of an object backend, the same on MinIO and Ceph RGW.

minio-py is synchronous, so every network call runs in a worker thread and the
event loop never blocks. Presigning needs no network (the region is set), so it
stays synchronous. The stores differ only in their admin calls (quotas, usage,
scoped credentials), which `minio_backend.py` and `rgw_backend.py` add.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar
from urllib.parse import urlparse

from minio import Minio
from minio.datatypes import Part
from minio.deleteobjects import DeleteObject
from minio.error import S3Error
from urllib3.exceptions import HTTPError

from gpucloud_libs.errors import DependencyUnavailable

from .backend import (
    AccessMode,
    BackendError,
    BucketNotEmpty,
    Credential,
    InvalidPart,
    NoSuchUpload,
    ObjectInfo,
    ObjectPage,
    UploadedPart,
)

T = TypeVar("T")

_READ_ACTIONS = ["s3:GetObject", "s3:ListBucket", "s3:GetBucketLocation"]
_WRITE_ACTIONS = [
    "s3:PutObject",
    "s3:DeleteObject",
    "s3:AbortMultipartUpload",
    "s3:ListMultipartUploadParts",
    "s3:ListBucketMultipartUploads",
]
#: Sorts after every key under a prefix, so a listing resumes past a "folder".
_PAST_PREFIX = "\U0010ffff"


def bucket_policy(
    bucket: str, mode: AccessMode, *, until: datetime | None = None
) -> dict[str, Any]:
    """An IAM policy allowing `mode` on `bucket` and its objects, nothing else; with
    `until`, only before that instant (for a store that does not expire keys)."""
    actions = _READ_ACTIONS + (_WRITE_ACTIONS if mode == "read-write" else [])
    statement: dict[str, Any] = {
        "Effect": "Allow",
        "Action": actions,
        "Resource": [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"],
    }
    if until is not None:
        statement["Condition"] = {"DateLessThan": {"aws:CurrentTime": iso_seconds(until)}}
    return {"Version": "2012-10-17", "Statement": [statement]}


def iso_seconds(instant: datetime) -> str:
    return instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class S3Backend:
    """Buckets, presigned URLs, multipart uploads and listings over plain S3, as the
    service's own user; a subclass adds the store's admin calls."""

    def __init__(
        self,
        endpoint: str,
        access_key: str,
        secret_key: str,
        region: str,
        public_endpoint: str | None = None,
    ) -> None:
        self.region = region
        self.public_endpoint = public_endpoint or endpoint
        self._endpoint = urlparse(endpoint)
        self._client = Minio(
            self._endpoint.netloc,
            access_key=access_key,
            secret_key=secret_key,
            secure=self._endpoint.scheme == "https",
            region=region,
        )
        self._public = urlparse(self.public_endpoint)
        self._signers: dict[Credential, Minio] = {}
        #: The service's own key pair, for a subclass's admin calls.
        self._own = Credential(access_key, secret_key)

    async def _run(self, call: Callable[[], T]) -> T:
        try:
            return await asyncio.to_thread(call)
        except S3Error as error:
            if error.code == "BucketNotEmpty":
                raise BucketNotEmpty(error.message or error.code, error.code) from error
            if error.code == "NoSuchUpload":
                raise NoSuchUpload(error.message or error.code, error.code) from error
            if error.code in {"InvalidPart", "InvalidPartOrder", "EntityTooSmall"}:
                raise InvalidPart(error.message or error.code, error.code) from error
            raise BackendError(f"{error.code}: {error.message}", error.code or "") from error
        except (HTTPError, OSError) as error:
            raise DependencyUnavailable(f"object store unavailable: {error}") from error

    async def start(self) -> None:
        return None

    async def ping(self) -> None:
        await self._run(self._client.list_buckets)

    def _make_bucket(self, bucket: str) -> None:
        if not self._client.bucket_exists(bucket):
            self._client.make_bucket(bucket)

    async def delete_bucket(self, bucket: str, *, force: bool) -> None:
        def delete() -> None:
            if not self._client.bucket_exists(bucket):
                return
            if force:
                self._empty(bucket)
            self._client.remove_bucket(bucket)

        await self._run(delete)

    def _empty(self, bucket: str) -> None:
        """Delete every object and unfinished upload, a thousand keys per request."""
        keys = (obj.object_name for obj in self._client.list_objects(bucket, recursive=True))
        while batch := [DeleteObject(key) for key in itertools.islice(keys, 1000) if key]:
            errors = list(self._client.remove_objects(bucket, batch))
            if errors:
                raise BackendError(f"could not delete {len(errors)} objects: {errors[0]}")
        while True:
            uploads = self._client._list_multipart_uploads(bucket, max_uploads=1000).uploads
            if not uploads:
                return
            for upload in uploads:
                self._client._abort_multipart_upload(
                    bucket, upload.object_name, upload.upload_id or ""
                )

    def _signer(self, credential: Credential) -> Minio:
        # Presigned URLs carry the host they were signed for: the one clients reach.
        if credential not in self._signers:
            if len(self._signers) > 1024:
                self._signers.clear()
            self._signers[credential] = Minio(
                self._public.netloc,
                access_key=credential.access_key,
                secret_key=credential.secret_key,
                secure=self._public.scheme == "https",
                region=self.region,
            )
        return self._signers[credential]

    def presign_get(self, signer: Credential, bucket: str, key: str, expires_s: int) -> str:
        return self._signer(signer).get_presigned_url(
            "GET", bucket, key, timedelta(seconds=expires_s)
        )

    def presign_put(self, signer: Credential, bucket: str, key: str, expires_s: int) -> str:
        return self._signer(signer).get_presigned_url(
            "PUT", bucket, key, timedelta(seconds=expires_s)
        )

    def presign_part(
        self,
        signer: Credential,
        bucket: str,
        key: str,
        upload_id: str,
        part_number: int,
        expires_s: int,
    ) -> str:
        return self._signer(signer).get_presigned_url(
            "PUT",
            bucket,
            key,
            timedelta(seconds=expires_s),
            extra_query_params={"uploadId": upload_id, "partNumber": str(part_number)},
        )

    # minio-py has no public multipart calls (its put_object splits files
    # itself); its own underscored ones are the documented S3 operations.
    async def start_multipart(self, bucket: str, key: str) -> str:
        return await self._run(lambda: self._client._create_multipart_upload(bucket, key, {}))

    async def complete_multipart(
        self, bucket: str, key: str, upload_id: str, parts: list[UploadedPart]
    ) -> str:
        s3_parts = [Part(part.part_number, part.etag) for part in parts]
        result = await self._run(
            lambda: self._client._complete_multipart_upload(bucket, key, upload_id, s3_parts)
        )
        return str(result.etag)

    async def abort_multipart(self, bucket: str, key: str, upload_id: str) -> None:
        await self._run(lambda: self._client._abort_multipart_upload(bucket, key, upload_id))

    async def list_objects(
        self, bucket: str, *, prefix: str, start_after: str | None, limit: int, delimiter: str
    ) -> ObjectPage:
        def page() -> ObjectPage:
            # One request: max-keys is the page size, and islice stops before the next.
            listing = self._client._list_objects(
                bucket, prefix=prefix, delimiter=delimiter, max_keys=limit,
                start_after=start_after,
            )  # fmt: skip
            items = list(itertools.islice(listing, limit))
            objects = [
                ObjectInfo(
                    key=item.object_name or "",
                    size=item.size or 0,
                    etag=(item.etag or "").strip('"'),
                    last_modified=item.last_modified,
                )
                for item in items
                if not item.is_dir
            ]
            prefixes = [item.object_name or "" for item in items if item.is_dir]
            next_after = None
            if len(items) == limit:
                last = items[-1]
                name = last.object_name or ""
                next_after = name + _PAST_PREFIX if last.is_dir else name
            return ObjectPage(objects=objects, prefixes=prefixes, next_start_after=next_after)

        return await self._run(page)

    async def head_object(self, bucket: str, key: str) -> ObjectInfo | None:
        def head() -> ObjectInfo | None:
            try:
                stat = self._client.stat_object(bucket, key)
            except S3Error as error:
                if error.code in {"NoSuchKey", "NoSuchObject", "ResourceNotFound"}:
                    return None
                raise
            return ObjectInfo(
                key=key,
                size=stat.size or 0,
                etag=(stat.etag or "").strip('"'),
                last_modified=stat.last_modified,
            )

        return await self._run(head)
