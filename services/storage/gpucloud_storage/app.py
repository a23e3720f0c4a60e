"""Storage service: buckets with quotas, volumes, scoped accessors and presigned transfers."""

from __future__ import annotations

from fastapi import FastAPI

from gpucloud_libs.identity import require_strong_key
from gpucloud_libs.kafka_access import ACCESS
from gpucloud_libs.kube import KubeClient
from gpucloud_libs.runtime import ServiceRuntime
from gpucloud_libs.sealing import SecretBox
from gpucloud_libs.topics import INFERENCE_LIFECYCLE, INSTANCE_LIFECYCLE, JOB_LIFECYCLE, TENANTS

from .accessors import Accessors
from .api import router
from .attachments import Attachments
from .backend import ObjectBackend
from .clusters import StorageClusters
from .handlers import EventHandlers
from .minio_backend import MinioBackend
from .ownership import OwnedStorages
from .presigners import Presigners
from .rgw_backend import RgwBackend
from .settings import StorageSettings
from .storages import Storages
from .store import INDEXES, AccessorStore, AttachmentStore, StorageStore, TenantStore, UploadStore
from .teardown import Teardown
from .tenancy import Tenancy
from .transfers import Transfers
from .usage import UsagePublisher


def _backend(settings: StorageSettings, runtime: ServiceRuntime) -> ObjectBackend:
    """The object store, as the settings name it."""
    backend = (RgwBackend if settings.object_store == "rgw" else MinioBackend)(
        settings.s3_endpoint,
        settings.s3_access_key,
        settings.s3_secret_key.get_secret_value(),
        settings.s3_region,
        public_endpoint=settings.s3_public_endpoint,
    )
    # The object store's own user: a guessable password would be every tenant's bytes (L3).
    s3_secret = settings.s3_secret_key.get_secret_value()
    runtime.check_key_at_start(
        lambda: require_strong_key(s3_secret, setting="GPUCLOUD_S3_SECRET_KEY")
    )
    return backend


def create_app(settings: StorageSettings) -> FastAPI:
    """The storage service, wired: its object store, stores and parts, consumers and schedules."""
    runtime = ServiceRuntime(settings, kafka_access=ACCESS["storage"], indexes=INDEXES)
    backend = _backend(settings, runtime)
    kube = KubeClient(settings.kubeconfig)
    tenants, storage_store = TenantStore(runtime.db), StorageStore(runtime.db)
    attachment_store = AttachmentStore(runtime.db)
    owned = OwnedStorages(storage_store, tenants)
    usage = UsagePublisher(backend, runtime.broker, storage_store)
    accessors = Accessors(backend, AccessorStore(runtime.db), owned)
    sealed_keys = SecretBox(
        settings.storage_secrets_key.get_secret_value(), setting="GPUCLOUD_STORAGE_SECRETS_KEY"
    )
    clusters = StorageClusters(runtime.db, sealed_keys, settings)
    attachments = Attachments(
        backend, kube, clusters, storage_store, attachment_store, accessors, owned
    )
    runtime.check_key_at_start(sealed_keys.check)
    presigners = Presigners(backend, storage_store, sealed_keys)
    teardown = Teardown(backend, kube, storage_store, accessors, usage, presigners)
    storages = Storages(
        settings, backend, kube, tenants, storage_store, attachment_store, owned, teardown
    )
    handlers = EventHandlers(Tenancy(tenants, attachment_store, attachments, teardown), attachments)

    runtime.on_start(kube.connect)
    runtime.on_start(backend.start)
    runtime.on_stop(teardown.close)
    runtime.on_stop(kube.close)
    runtime.on_stop(clusters.close)
    runtime.add_readiness_check("object_store", backend.ping)
    runtime.add_readiness_check("kubernetes", kube.ping)
    runtime.subscribe(TENANTS, handlers.on_tenant)
    runtime.subscribe_batches(INSTANCE_LIFECYCLE, handlers.on_lifecycle)
    runtime.subscribe_batches(JOB_LIFECYCLE, handlers.on_job_lifecycle)
    runtime.subscribe_batches(INFERENCE_LIFECYCLE, handlers.on_inference_lifecycle)
    runtime.every(settings.usage_interval_s, usage.sample, "usage")
    runtime.every(settings.sweep_interval_s, storages.sweep, "sweep")

    return runtime.create_app(
        title="gpucloud storage",
        description="Object and volume storages, scoped accessors, presigned upload and download.",
        routers=[router],
        parts=[
            storages,
            accessors,
            Transfers(settings, backend, UploadStore(runtime.db), owned, presigners),
            attachments,
            clusters,
        ],
    )
