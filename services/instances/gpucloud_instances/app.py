"""Instances service: specs, stocks, GPU instances, batch jobs and inference services on
Kubernetes."""

from __future__ import annotations

import asyncio

from gpucloud_libs.kafka_access import ACCESS
from gpucloud_libs.kube import KubeClient
from gpucloud_libs.runtime import ServiceRuntime
from gpucloud_libs.sealing import SecretBox
from gpucloud_libs.topics import ALERTS, INSTANCE_COMMANDS, NODE_HEALTH, TENANTS

from . import quota_ledger
from .api import router
from .controller import NodeCordons, build_controller
from .handlers import EventHandlers
from .inference import InferenceServices
from .instances import Instances
from .jobs import Jobs
from .list_model import InstanceListModel
from .log_streams import LogStreams
from .pull_secrets import PullSecrets
from .queue_line import QueueLines
from .quota_ledger import QuotaLedger
from .registry_credentials import RegistryCredentials
from .settings import InstancesSettings
from .specs import Specs
from .stock_targets import StockTargets
from .storages import StorageClient
from .store import (
    INDEXES,
    InstanceStore,
    JobStore,
    QueueLineStore,
    RegistryCredentialStore,
    RequestStore,
    ServiceStore,
    SpecStore,
    StockStore,
    TenantStore,
)
from .templates import ImagePolicy, Templates
from .tenancy import Tenancy
from .wakeups import ControllerWakeups, InstanceChanges

settings = InstancesSettings()
runtime = ServiceRuntime(
    settings, kafka_access=ACCESS["instances"], indexes={**INDEXES, **quota_ledger.INDEXES}
)
kube = KubeClient(settings.kubeconfig)
log_streams = LogStreams.from_settings(settings)
specs, tenants, instances = (
    SpecStore(runtime.db),
    TenantStore(runtime.db),
    InstanceStore(runtime.db, InstanceListModel() if settings.lists_from_memory else None),
)
stocks, requests, quota = StockStore(runtime.db), RequestStore(runtime.db), QuotaLedger(runtime.db)
jobs, services = JobStore(runtime.db), ServiceStore(runtime.db)
line_store = QueueLineStore(runtime.db)
lines = QueueLines(line_store)
registry_box = SecretBox(
    settings.registry_secrets_key.get_secret_value(), setting="GPUCLOUD_REGISTRY_SECRETS_KEY"
)
runtime.check_key_at_start(registry_box.check)
registry_credentials = RegistryCredentialStore(runtime.db)
pull_secrets = PullSecrets(registry_credentials, registry_box, kube)
changes = InstanceChanges()
storage = StorageClient(settings.storage_url, runtime.identity_signer())
controller = build_controller(
    settings, kube, runtime.broker, specs=specs, tenants=tenants, instances=instances, jobs=jobs,
    services=services, stocks=stocks, pull_secrets=pull_secrets, requests=requests, quota=quota, changes=changes, storage=storage, lines=line_store,
)  # fmt: skip
wakeups = ControllerWakeups(requests, controller.wake, controller.wake_new)
spec_catalog = Specs(specs, stocks)
tenancy = Tenancy(settings, tenants, instances, jobs, services, requests, wakeups)
handlers = EventHandlers(tenancy, NodeCordons(kube))

filling: list[asyncio.Task[None]] = []


async def start_filling_lists() -> None:
    filling.append(asyncio.create_task(instances.fill_lists(), name="fill-instance-lists"))


async def stop_filling_lists() -> None:
    for task in filling:
        task.cancel()
    await asyncio.gather(*filling, return_exceptions=True)


runtime.on_start(kube.connect)
runtime.on_start(log_streams.connect)
runtime.on_start(start_filling_lists)
runtime.on_start(controller.start)
runtime.on_stop(controller.stop)
runtime.on_stop(stop_filling_lists)
runtime.on_stop(quota.close)
runtime.on_stop(kube.close)
runtime.on_stop(log_streams.close)
runtime.on_stop(storage.close)
runtime.add_readiness_check("kubernetes", kube.ping)
runtime.subscribe(TENANTS, handlers.on_tenant)
runtime.subscribe(INSTANCE_COMMANDS, handlers.on_command)
runtime.subscribe(NODE_HEALTH, handlers.on_node_health)
runtime.subscribe(ALERTS, handlers.on_alert)

app = runtime.create_app(
    title="gpucloud instances",
    description=(
        "GPU instance specs, warm stocks, instances, batch jobs and inference services on "
        "Kubernetes."
    ),
    routers=[router],
    parts=[
        spec_catalog,
        StockTargets(spec_catalog, stocks, wakeups),
        Instances(
            settings,
            specs,
            tenants,
            instances,
            requests,
            quota,
            storage,
            wakeups,
            changes,
            lines,
            log_streams,
        ),
        Jobs(
            log_streams,
            specs,
            tenants,
            jobs,
            requests,
            storage,
            wakeups,
            lines,
            ImagePolicy(settings.allowed_registries),
        ),
        InferenceServices(settings, specs, tenants, services, requests, quota, storage, wakeups),
        Templates(),
        RegistryCredentials(registry_credentials, tenants, registry_box, pull_secrets),
    ],
)
