"""Instances service: specs, stocks, GPU instances, batch jobs and inference services on
Kubernetes."""

from __future__ import annotations

import asyncio

from fastapi import FastAPI
from pydantic import SecretStr

from gpucloud_libs.kafka_access import ACCESS
from gpucloud_libs.kube import KubeClient
from gpucloud_libs.runtime import ServiceRuntime
from gpucloud_libs.sealing import SecretBox
from gpucloud_libs.topics import ALERTS, INSTANCE_COMMANDS, NODE_HEALTH, TENANTS

from . import quota_ledger
from .cluster_clients import ClusterClients
from .clusters.api import router as clusters_router
from .clusters.placement import Placement
from .clusters.service import Clusters
from .controller.nodes import NodeCordons
from .controller.wiring import build_controller
from .handlers import EventHandlers
from .inference.api import router as services_router
from .inference.service import InferenceServices
from .instances.access import InstanceAccess
from .instances.api import router as instances_router
from .instances.service import Instances
from .instances.store import InstanceStore
from .jobs.api import router as jobs_router
from .jobs.service import Jobs
from .log_streams import LogStreams
from .queue.line import QueueLines
from .registry.api import router as registry_router
from .registry.credentials import RegistryCredentials
from .registry.pull_secrets import PullSecrets
from .settings import InstancesSettings
from .specs.api import router as specs_router
from .specs.service import Specs
from .stocks.api import router as stocks_router
from .stocks.targets import StockTargets
from .storages import StorageClient
from .store import INDEXES
from .stores import Stores
from .templates.api import router as templates_router
from .templates.catalog import ImagePolicy, Templates
from .tenancy.api import router as kubeconfig_router
from .tenancy.kubeconfigs import UserKubeconfigs
from .tenancy.tenants import Tenancy
from .wakeups import ControllerWakeups
from .workloads.parts import WorkloadParts


def create_app(settings: InstancesSettings) -> FastAPI:
    """The instances service, wired: its stores, the controller, its consumers and the API's
    parts."""
    runtime = ServiceRuntime(
        settings, kafka_access=ACCESS["instances"], indexes={**INDEXES, **quota_ledger.INDEXES}
    )
    kube = KubeClient(settings.kubeconfig)
    db = Stores.of(runtime.db, settings)
    specs, tenants, instances, requests, quota = (db.specs, db.tenants, db.instances, db.requests, db.quota)  # fmt: skip
    lines = QueueLines(db.lines)
    registry_box = _secret_box(runtime, settings.registry_secrets_key, "REGISTRY")
    placement = Placement(db.clusters, settings.cluster_name)
    clusters = Clusters(
        settings, db.clusters, _secret_box(runtime, settings.cluster_secrets_key, "CLUSTER"), kube,
        db.use_of_clusters(settings), placement, runtime.broker,
    )  # fmt: skip
    log_streams = LogStreams.from_settings(settings, clusters.kubeconfig_of)
    pull_secrets = PullSecrets(db.registry_credentials, registry_box, kube)
    storage = StorageClient(settings.storage_url, runtime.identity_signer())
    controller = build_controller(
        settings, kube, runtime.broker, db, storage=storage, clusters=clusters,
        pull_secrets=pull_secrets,
    )  # fmt: skip
    wakeups = ControllerWakeups(requests, controller.wake, controller.wake_new)
    spec_catalog = Specs(specs, db.stocks)
    tenancy = Tenancy(settings, tenants, instances, db.jobs, db.services, requests, wakeups)
    cordoned_in = ClusterClients(kube, settings.cluster_name, clusters.kubeconfig_of)
    handlers = EventHandlers(
        tenancy, NodeCordons(cordoned_in), UserKubeconfigs(settings, kube, tenants)
    )
    filling = CacheFilling(instances)
    parts = WorkloadParts(
        specs, tenants, requests, storage, wakeups, lines, ImagePolicy(settings.allowed_registries),
        placement,
    )  # fmt: skip
    for start in (kube.connect, log_streams.connect, filling.start, clusters.record_home, controller.start):  # fmt: skip
        runtime.on_start(start)
    # Run in the reverse order: the controller stops first, while Kubernetes is still
    # connected, so it hands its lease back and the next leader need not wait it out.
    for stop in (kube.close, cordoned_in.close, log_streams.close, storage.close, quota.close, filling.stop, controller.stop):  # fmt: skip
        runtime.on_stop(stop)
    runtime.add_readiness_check("kubernetes", kube.ping)
    for topic, handler in ((TENANTS, handlers.on_tenant), (INSTANCE_COMMANDS, handlers.on_command),
                           (NODE_HEALTH, handlers.on_node_health), (ALERTS, handlers.on_alert)):  # fmt: skip
        runtime.subscribe(topic, handler)
    return runtime.create_app(
        title="gpucloud instances",
        description="GPU instance specs, warm stocks, instances, batch jobs and inference services on Kubernetes.",
        routers=[instances_router, jobs_router, services_router, specs_router, stocks_router, templates_router, registry_router, clusters_router, kubeconfig_router],
        parts=[
            spec_catalog,
            StockTargets(spec_catalog, db.stocks, db.clusters, wakeups, home=settings.cluster_name),
            Instances(settings, parts, instances, quota),
            InstanceAccess(instances, log_streams),
            Jobs(parts, db.jobs, log_streams),
            InferenceServices(settings, parts, db.services, quota),
            Templates(),
            RegistryCredentials(db.registry_credentials, tenants, registry_box, pull_secrets),
            clusters,
            handlers.kubeconfigs,
        ],
    )  # fmt: skip


def _secret_box(runtime: ServiceRuntime, key: SecretStr, kind: str) -> SecretBox:
    """A box sealing with `GPUCLOUD_<kind>_SECRETS_KEY`, checked at start."""
    box = SecretBox(key.get_secret_value(), setting=f"GPUCLOUD_{kind}_SECRETS_KEY")
    runtime.check_key_at_start(box.check)
    return box


class CacheFilling:
    """Fills the workload cache from the store in the background, from the start (the
    API reads the store until it is full)."""

    def __init__(self, instances: InstanceStore) -> None:
        self._instances = instances
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        self._tasks.append(
            asyncio.create_task(self._instances.fill_cache(), name="fill-instance-cache")
        )

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
