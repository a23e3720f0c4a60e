"""What the storage service needs from an object store, whatever runs it.

Two stores implement it for real, over the same S3 calls (`s3_backend.py`):
MinIO through its admin API (`minio_backend.py`) and Ceph RGW through its
admin-ops and IAM APIs (`rgw_backend.py`). Nothing here is specific to either:
no admin-API payloads, no store's error types.

Every method is async; implementations keep blocking clients off the event loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, Protocol

AccessMode = Literal["read-only", "read-write"]


class BackendError(Exception):
    """The object store refused or failed a call; `code` is the store's error code."""

    def __init__(self, message: str, code: str = "") -> None:
        super().__init__(message)
        self.code = code


class BucketNotEmpty(BackendError):
    pass


class NoSuchUpload(BackendError):
    pass


class InvalidPart(BackendError):
    """A completed multipart upload named a part that was not uploaded, or a wrong ETag."""


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int
    etag: str
    last_modified: datetime | None


@dataclass(frozen=True)
class ObjectPage:
    objects: list[ObjectInfo]
    #: Common prefixes ("folders") when listing with a delimiter.
    prefixes: list[str]
    #: Pass back as `start_after` for the next page; None on the last page.
    next_start_after: str | None


@dataclass(frozen=True)
class UploadedPart:
    part_number: int
    etag: str


@dataclass(frozen=True)
class Credential:
    access_key: str
    secret_key: str = field(repr=False)


class ObjectBackend(Protocol):
    #: The S3 endpoint clients (and instances) use for presigned URLs and credentials.
    public_endpoint: str
    region: str

    async def start(self) -> None:
        """Once, before the service serves: whatever the store needs set up first."""

    async def ping(self) -> None: ...

    async def create_bucket(self, bucket: str, quota_bytes: int) -> None:
        """Create the bucket (idempotent) with a hard quota the store itself enforces."""

    async def set_quota(self, bucket: str, quota_bytes: int) -> None: ...

    async def delete_bucket(self, bucket: str, *, force: bool) -> None:
        """Remove the bucket; without `force`, BucketNotEmpty if it holds objects."""

    async def bucket_usage(self) -> dict[str, int]:
        """Bytes stored per bucket, as the store accounts them for its quotas."""

    async def create_credential(
        self,
        *,
        access_key: str,
        secret_key: str,
        bucket: str,
        mode: AccessMode,
        expires_at: datetime | None,
        description: str,
    ) -> None:
        """A key pair that can reach `bucket` only, with `mode`; the store expires it."""

    async def revoke_credential(self, access_key: str) -> None:
        """Remove the key pair now (idempotent): its next request is refused."""

    # Presigned URLs are signed with `signer`, a key pair of the storage's own
    # (presigners.py): never the service's key, and revocable with the storage.
    def presign_get(self, signer: Credential, bucket: str, key: str, expires_s: int) -> str: ...

    def presign_put(self, signer: Credential, bucket: str, key: str, expires_s: int) -> str: ...

    def presign_part(
        self,
        signer: Credential,
        bucket: str,
        key: str,
        upload_id: str,
        part_number: int,
        expires_s: int,
    ) -> str: ...

    async def start_multipart(self, bucket: str, key: str) -> str:
        """A new multipart upload's id."""

    async def complete_multipart(
        self, bucket: str, key: str, upload_id: str, parts: list[UploadedPart]
    ) -> str:
        """Assemble the parts; returns the object's ETag."""

    async def abort_multipart(self, bucket: str, key: str, upload_id: str) -> None: ...

    async def list_objects(
        self, bucket: str, *, prefix: str, start_after: str | None, limit: int, delimiter: str
    ) -> ObjectPage: ...

    async def head_object(self, bucket: str, key: str) -> ObjectInfo | None: ...
