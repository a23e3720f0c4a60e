"""Storage service: buckets with quotas, volumes, scoped accessors and presigned transfers."""

from __future__ import annotations

from gpucloud_libs.kube import KubeClient
from gpucloud_libs.runtime import ServiceRuntime
from gpucloud_libs.topics import INSTANCE_LIFECYCLE, TENANTS

from .api import router
from .handlers import EventHandlers
from .minio_backend import MinioBackend
from .service import StorageService
from .settings import StorageSettings
from .store import INDEXES, AccessorStore, AttachmentStore, StorageStore, TenantStore, UploadStore

settings = StorageSettings()
runtime = ServiceRuntime(settings, indexes=INDEXES)
backend = MinioBackend(
    settings.s3_endpoint,
    settings.s3_access_key,
    settings.s3_secret_key.get_secret_value(),
    settings.s3_region,
    public_endpoint=settings.s3_public_endpoint,
)
kube = KubeClient(settings.kubeconfig)
service = StorageService(
    settings, backend, kube, runtime.broker,
    TenantStore(runtime.db), StorageStore(runtime.db), AccessorStore(runtime.db),
    UploadStore(runtime.db), AttachmentStore(runtime.db),
)  # fmt: skip
handlers = EventHandlers(service)


async def _kube_ready() -> None:
    await kube.server_version()


runtime.on_start(kube.connect)
runtime.on_stop(service.close)
runtime.on_stop(kube.close)
runtime.add_readiness_check("object_store", backend.ping)
runtime.add_readiness_check("kubernetes", _kube_ready)
runtime.subscribe(TENANTS, handlers.on_tenant)
runtime.subscribe_batches(INSTANCE_LIFECYCLE, handlers.on_lifecycle)
runtime.every(settings.usage_interval_s, service.sample_usage, "usage")
runtime.every(settings.sweep_interval_s, service.sweep, "sweep")

app = runtime.create_app(
    title="gpucloud storage",
    description="Object and volume storages, scoped accessors, presigned upload and download.",
    routers=[router],
)
app.state.service = service
