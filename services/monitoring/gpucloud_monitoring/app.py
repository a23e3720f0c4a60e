"""Monitoring service: GPU telemetry ingestion, alert rules, inventory and node health."""

from __future__ import annotations

from fastapi import FastAPI

from gpucloud_libs.identity import require_strong_key
from gpucloud_libs.kafka_access import ACCESS
from gpucloud_libs.kube import KubeClient
from gpucloud_libs.outbound_guard import OutboundGuard
from gpucloud_libs.runtime import ServiceRuntime
from gpucloud_libs.topics import (
    CLUSTERS,
    INFERENCE_LIFECYCLE,
    INSTANCE_LIFECYCLE,
    JOB_LIFECYCLE,
    TELEMETRY,
    TENANTS,
)

from .alert_rules import AlertRules
from .alerts import Alerts
from .api import router
from .fleet import Fleet
from .fleet_requests import FleetRequestSeal
from .handlers import EventHandlers
from .health import HealthTracker
from .ingest import Ingest
from .known_nodes import KnownNodes
from .metrics import Metrics
from .node_health import NodeHealth
from .node_keys import NodeKeys, NodeSeals
from .other_clusters import OtherClusters
from .provenance import Provenance
from .rules import RuleEngine
from .settings import MonitoringSettings
from .store import INDEXES, MonitoringStore
from .webhook_secrets import WebhookSecrets
from .webhooks import Webhooks
from .workload_projects import WorkloadProjects


def _alerting(
    settings: MonitoringSettings,
    runtime: ServiceRuntime,
    store: MonitoringStore,
    engine: RuleEngine,
) -> tuple[Webhooks, Alerts, AlertRules]:
    """Rules, the alerts they fire, and the webhooks that carry them."""
    guard = OutboundGuard(
        field="webhookURL",
        allow_private_networks=settings.webhook_allow_private_networks,
        loopback_only=settings.loopback_only,
        nameservers=settings.webhook_nameservers,
    )
    webhook_secrets = WebhookSecrets(settings.webhook_secrets_key.get_secret_value())
    runtime.check_key_at_start(webhook_secrets.check)
    webhooks = Webhooks(store, guard, webhook_secrets)
    alerts = Alerts(store, runtime.broker, engine, webhooks, source=runtime.source)
    rules = AlertRules(
        store, engine, alerts, webhooks, guard, webhook_secrets,
        max_per_tenant=settings.max_rules_per_tenant,
    )  # fmt: skip
    return webhooks, alerts, rules


def _provenance(
    settings: MonitoringSettings, store: MonitoringStore, kube: KubeClient, seal: FleetRequestSeal,
    runtime: ServiceRuntime,
) -> tuple[Provenance, NodeKeys, OtherClusters]:  # fmt: skip
    """Which telemetry is taken (each node's seal, a node one of the clusters has, the
    operator's sealed requests), the node keys the agents get, and the other clusters'
    nodes."""
    telemetry_secret = settings.telemetry_secret.get_secret_value()
    runtime.check_key_at_start(
        lambda: require_strong_key(telemetry_secret, setting="GPUCLOUD_TELEMETRY_SECRET")
    )
    node_seals = NodeSeals(telemetry_secret)
    known_nodes = KnownNodes(kube) if settings.known_nodes_only else None
    return (
        Provenance(node_seals, seal, known_nodes),
        NodeKeys(kube, node_seals, settings.agent_service_accounts),
        OtherClusters(store, known_nodes),
    )


def create_app(settings: MonitoringSettings) -> FastAPI:
    """The monitoring service, wired: ingest, rules, alerts, webhooks and node health."""
    runtime = ServiceRuntime(settings, kafka_access=ACCESS["monitoring"], indexes=INDEXES)
    kube = KubeClient(settings.kubeconfig)
    store = MonitoringStore(runtime.db)
    engine, tracker = RuleEngine(), HealthTracker()
    webhooks, alerts, rules = _alerting(settings, runtime, store, engine)
    node_health = NodeHealth(store, runtime.broker, tracker, source=runtime.source)
    seal = FleetRequestSeal(settings.webhook_secrets_key.get_secret_value())
    provenance, node_keys, other_clusters = _provenance(settings, store, kube, seal, runtime)
    ingest = Ingest(settings, store, engine, tracker, alerts, node_health, provenance)
    fleet = Fleet(store, kube, runtime.broker, seal, source=runtime.source)
    projects = WorkloadProjects(store)
    handlers = EventHandlers(ingest, rules, other_clusters, projects)

    async def _restore() -> None:
        """What the consumers keep in memory, from the store, before they consume."""
        await node_health.restore()
        await other_clusters.restore()
        await rules.reload()
        await alerts.restore()

    async def _republish() -> None:
        await node_health.republish()
        await alerts.sweep()

    runtime.on_start(kube.connect)
    runtime.on_start(_restore)
    runtime.on_stop(webhooks.close)
    runtime.on_stop(kube.close)
    runtime.add_readiness_check("kubernetes", kube.ping)
    runtime.subscribe_batches(TELEMETRY, handlers.on_telemetry)
    runtime.subscribe(TENANTS, handlers.on_tenant)
    runtime.subscribe(CLUSTERS, handlers.on_clusters)
    for lifecycle in (INSTANCE_LIFECYCLE, JOB_LIFECYCLE, INFERENCE_LIFECYCLE):
        runtime.subscribe_batches(lifecycle, projects.on_lifecycle)
    runtime.every(1.0, webhooks.deliver, "webhooks")
    runtime.every(5.0, _republish, "republish")
    runtime.every(5.0, rules.reload, "rules")
    runtime.every(30.0, ingest.flush_quiet, "flush-quiet")
    runtime.every(30.0, fleet.refresh_nodes, "nodes")
    runtime.every(30.0, other_clusters.restore, "other-clusters")
    runtime.every(3600.0, ingest.retention, "retention")

    return runtime.create_app(
        title="gpucloud monitoring",
        description="GPU telemetry ingestion, alert rules, inventory and node health.",
        routers=[router],
        parts=[Metrics(store, projects), fleet, rules, alerts, node_keys, projects],
    )
