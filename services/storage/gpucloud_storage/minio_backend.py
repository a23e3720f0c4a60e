"""MinIO behind `ObjectBackend`: the S3 calls of `S3Backend` plus MinIO's admin API.

Accessors and presigners are MinIO service accounts of the storage service's own
user (never root; minio_access.py), each with an inline policy naming one bucket:
MinIO intersects it with the parent's rights, enforces the expiry, and forgets
the key the moment it is deleted.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from functools import cached_property
from typing import TypeVar

from minio import MinioAdmin
from minio.credentials.providers import StaticProvider
from minio.error import MinioAdminException

from .backend import AccessMode, BackendError
from .s3_backend import S3Backend, bucket_policy, iso_seconds

T = TypeVar("T")


class MinioBackend(S3Backend):
    @cached_property
    def _admin(self) -> MinioAdmin:
        return MinioAdmin(
            endpoint=self._endpoint.netloc,
            credentials=StaticProvider(self._own.access_key, self._own.secret_key),
            region=self.region,
            secure=self._endpoint.scheme == "https",
        )

    async def _run(self, call: Callable[[], T]) -> T:
        try:
            return await super()._run(call)
        except MinioAdminException as error:
            raise BackendError(f"admin API {error._code}: {error._body}"[:500]) from error

    async def create_bucket(self, bucket: str, quota_bytes: int) -> None:
        def create() -> None:
            self._make_bucket(bucket)
            self._admin.bucket_quota_set(bucket, quota_bytes)

        await self._run(create)

    async def set_quota(self, bucket: str, quota_bytes: int) -> None:
        await self._run(lambda: self._admin.bucket_quota_set(bucket, quota_bytes))

    async def bucket_usage(self) -> dict[str, int]:
        raw = await self._run(self._admin.get_data_usage_info)
        buckets = json.loads(raw).get("bucketsUsageInfo") or {}
        return {name: int(info.get("size", 0)) for name, info in buckets.items()}

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
        expiration = iso_seconds(expires_at) if expires_at else None
        await self._run(
            lambda: self._admin.add_service_account(
                access_key=access_key,
                secret_key=secret_key,
                description=description[:256],
                policy=bucket_policy(bucket, mode),
                expiration=expiration,
            )
        )

    async def revoke_credential(self, access_key: str) -> None:
        try:
            await self._run(lambda: self._admin.delete_service_account(access_key))
        except BackendError as error:
            if "not exist" not in str(error).lower() and "not found" not in str(error).lower():
                raise
