"""Storage service: buckets with quotas, volumes, scoped accessors and presigned transfers."""

from __future__ import annotations

from gpucloud_libs.runtime import ServiceRuntime

from .api import router
from .s3 import ObjectStore
from .settings import StorageSettings

settings = StorageSettings()
runtime = ServiceRuntime(settings)
object_store = ObjectStore(
    settings.s3_endpoint,
    settings.s3_access_key,
    settings.s3_secret_key.get_secret_value(),
    settings.s3_region,
)
runtime.add_readiness_check("object_store", object_store.ping)

app = runtime.create_app(
    title="gpucloud storage",
    description="Object and volume storages, scoped accessors, presigned upload and download.",
    routers=[router],
)
