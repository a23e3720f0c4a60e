"""S3 as a workload or a tenant's tool reaches it: a client holding nothing but an
accessor's credentials, and the calls the tests make with it."""

from __future__ import annotations

import asyncio
import io
from typing import Any
from urllib.parse import urlparse

import pytest
from minio import Minio
from minio.error import S3Error


def s3_as(accessor: dict[str, Any]) -> Minio:
    """An S3 client holding nothing but the accessor's credentials."""
    endpoint = urlparse(accessor["endpoint"])
    return Minio(
        endpoint.netloc,
        access_key=accessor["accessorID"],
        secret_key=accessor["secretAccessKey"],
        secure=endpoint.scheme == "https",
        region=accessor["region"],
    )


async def s3_error(call: Any) -> str:
    """The S3 error code of a call that must fail."""
    with pytest.raises(S3Error) as refused:
        await asyncio.to_thread(call)
    return str(refused.value.code)


def put(client: Minio, bucket: str, key: str, data: bytes) -> None:
    client.put_object(bucket, key, io.BytesIO(data), len(data))


def get(client: Minio, bucket: str, key: str) -> bytes:
    response = client.get_object(bucket, key)
    try:
        return response.read()
    finally:
        response.close()
        response.release_conn()
