"""Instances service: specs, stocks and the GPU instance lifecycle on Kubernetes."""

from __future__ import annotations

from gpucloud_libs.kube import KubeClient
from gpucloud_libs.runtime import ServiceRuntime
from gpucloud_libs.topics import INSTANCE_COMMANDS, NODE_HEALTH, TENANTS

from .api import router
from .controller import Controller
from .handlers import EventHandlers
from .service import InstancesService
from .settings import InstancesSettings
from .storages import StorageClient
from .store import INDEXES, InstanceStore, RequestStore, SpecStore, StockStore, TenantStore

settings = InstancesSettings()
runtime = ServiceRuntime(settings, indexes=INDEXES)
kube = KubeClient(settings.kubeconfig)
specs, tenants = SpecStore(runtime.db), TenantStore(runtime.db)
instances, stocks, requests = (
    InstanceStore(runtime.db),
    StockStore(runtime.db),
    RequestStore(runtime.db),
)
storage = StorageClient(settings.storage_url, settings.identity_signing_key.get_secret_value())
controller = Controller(
    settings, kube, runtime.broker, specs, tenants, instances, stocks, requests, storage
)
service = InstancesService(
    settings, specs, tenants, instances, stocks, requests, storage, wake=controller.wake
)
handlers = EventHandlers(service, controller)


async def _kube_ready() -> None:
    await kube.server_version()


runtime.on_start(kube.connect)
runtime.on_start(controller.start)
runtime.on_stop(controller.stop)
runtime.on_stop(kube.close)
runtime.on_stop(storage.close)
runtime.add_readiness_check("kubernetes", _kube_ready)
runtime.subscribe(TENANTS, handlers.on_tenant)
runtime.subscribe(INSTANCE_COMMANDS, handlers.on_command)
runtime.subscribe(NODE_HEALTH, handlers.on_node_health)

app = runtime.create_app(
    title="gpucloud instances",
    description="GPU instance specs, warm stocks and instance lifecycle on Kubernetes.",
    routers=[router],
)
app.state.service = service
