"""MinIO, the S3 store of the local stack."""

from __future__ import annotations

import asyncio
import io

from minio import Minio

from .support import unique


async def test_put_then_get_an_object(s3_admin: Minio) -> None:
    bucket = unique("smoke")
    payload = b"model weights" * 1000

    def roundtrip() -> bytes:
        s3_admin.make_bucket(bucket)
        try:
            s3_admin.put_object(bucket, "models/w.bin", io.BytesIO(payload), len(payload))
            response = s3_admin.get_object(bucket, "models/w.bin")
            try:
                return response.read()
            finally:
                response.close()
                response.release_conn()
        finally:
            s3_admin.remove_object(bucket, "models/w.bin")
            s3_admin.remove_bucket(bucket)

    assert await asyncio.to_thread(roundtrip) == payload
