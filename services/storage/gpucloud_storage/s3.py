"""The one boundary to the S3 backend: only this module imports the minio client.

minio-py is synchronous; its calls run in worker threads so the event loop
never blocks on the network.
"""

from __future__ import annotations

import asyncio
from urllib.parse import urlparse

from minio import Minio
from minio.error import S3Error
from urllib3.exceptions import HTTPError

from gpucloud_libs.errors import DependencyUnavailable


class ObjectStore:
    def __init__(self, endpoint: str, access_key: str, secret_key: str, region: str) -> None:
        url = urlparse(endpoint)
        self._client = Minio(
            url.netloc,
            access_key=access_key,
            secret_key=secret_key,
            secure=url.scheme == "https",
            region=region,
        )

    async def ping(self) -> None:
        """List buckets: proves the endpoint answers and the credentials are valid."""
        try:
            await asyncio.to_thread(self._client.list_buckets)
        except (S3Error, HTTPError, OSError) as error:
            raise DependencyUnavailable(f"object store unavailable: {error}") from error
