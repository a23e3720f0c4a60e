"""What the monitoring service does: ingest telemetry, roll it up, classify GPUs,
track node health, evaluate alert rules, and answer queries.

Ingestion is a batch at a time (libs: `subscribe_event_batches`); the offsets
are committed after the batch's writes, so a crash replays it. Replays are
harmless: roll-up windows, alerts and deliveries have deterministic ids, and
a transition is marked published only after Kafka acknowledged it.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import secrets
from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlparse

import httpx
from faststream.kafka import KafkaBroker

from gpucloud_libs.clock import aware, now
from gpucloud_libs.errors import Forbidden, NotFound, ValidationFailed
from gpucloud_libs.events import (
    AlertStateChanged,
    NodeHealthChanged,
    NodeInventory,
    NodeReleaseRequested,
    TelemetryBatch,
)
from gpucloud_libs.identity import Identity
from gpucloud_libs.kafka import publish_event
from gpucloud_libs.kube import KubeClient
from gpucloud_libs.mongo import Document
from gpucloud_libs.naming import GPU_PRODUCT_LABEL, ZONE_LABEL
from gpucloud_libs.outbox import PublishRetries
from gpucloud_libs.topics import ALERTS, NODE_HEALTH, TELEMETRY

from .health import HealthChange, HealthTracker
from .rollup import SERIES, Rollup
from .rules import AlertTransition, Rule, RuleEngine
from .schemas import (
    Alert,
    AlertRule,
    AlertRuleCreate,
    AlertRuleUpdate,
    FleetGroup,
    FleetSummary,
    GpuView,
    MetricPoint,
    MetricSeries,
    NodeView,
)
from .settings import MonitoringSettings
from .store import HOURS, MINUTES, MonitoringStore
from .tiers import Capability, classify

log = logging.getLogger(__name__)

#: Webhook retries: after 1, 2, 4 ... seconds, at most this many attempts.
WEBHOOK_ATTEMPTS = 8
WEBHOOK_TIMEOUT_S = 5.0


class MonitoringService:
    def __init__(
        self,
        settings: MonitoringSettings,
        store: MonitoringStore,
        broker: KafkaBroker,
        kube: KubeClient,
    ) -> None:
        self.settings = settings
        self.store = store
        self.broker = broker
        self.kube = kube
        self.source = "/gpucloud/monitoring"
        self.minutes = Rollup(60)
        self.hours = Rollup(3600)
        self.health = HealthTracker()
        self.rules = RuleEngine()
        self.node_labels: dict[str, dict[str, str]] = {}
        self._webhooks: dict[str, str] = {}  # rule id -> URL
        #: Pending webhook deliveries of this process, by id: when each is due next.
        #: None until the first round after a start has read the pending ones.
        self._due_deliveries: dict[str, datetime] | None = None
        self._http = httpx.AsyncClient(timeout=WEBHOOK_TIMEOUT_S)
        #: Alerts whose transition failed to publish: the sweep retries only these
        #: (after its first pass), never a publish still in flight.
        self._alert_retries = PublishRetries()

    async def start(self) -> None:
        for doc in await self.store.healths():
            self.health.restore(doc["_id"], doc["health"], tuple(doc.get("reasons", ())))
        await self.reload_rules()
        for alert in await self.store.firing():
            self.rules.restore_firing(
                alert["rule_id"], alert["subject"], alert["_id"], aware(alert["since"])
            )

    async def close(self) -> None:
        await self._http.aclose()

    # --- ingestion ------------------------------------------------------------------

    async def ingest(
        self,
        batches: list[TelemetryBatch],
        inventories: list[NodeInventory],
        releases: list[NodeReleaseRequested] | None = None,
    ) -> None:
        minute_docs: list[Document] = []
        hour_docs: list[Document] = []
        for batch in batches:
            for sample in batch.samples:
                minute_docs += self.minutes.add(batch.node, sample)
                hour_docs += self.hours.add(batch.node, sample)
                for transition in self.rules.observe(batch.node, sample):
                    await self._alert(transition)
            latest = max(sample.at for sample in batch.samples)
            change = self.health.observe(batch.node, list(batch.samples), latest)
            if change is not None:
                await self._health_changed(change)
        await self._write_rollups(minute_docs, hour_docs)
        for inventory in inventories:
            await self._inventory(inventory)
        for release in releases or []:
            change = self.health.release(release.node, release.at)
            if change is not None:
                await self._health_changed(change)

    async def flush_quiet(self) -> None:
        """Write the windows of GPUs that stopped reporting."""
        at = now()
        await self._write_rollups(self.minutes.flush_before(at), self.hours.flush_before(at))

    async def _write_rollups(self, minute_docs: list[Document], hour_docs: list[Document]) -> None:
        await self.store.insert_rollups(MINUTES, minute_docs)
        await self.store.insert_rollups(HOURS, hour_docs)
        by_node: dict[str, list[Document]] = defaultdict(list)
        for doc in minute_docs:
            by_node[doc["node"]].append(doc)
        for node, docs in by_node.items():
            newest = max(doc["start"] for doc in docs)
            gpus = {
                doc["gpu_uuid"]: {
                    key: doc[key]
                    for key in (
                        "tenant_id",
                        "instance_id",
                        "utilization_gpu_pct_avg",
                        "memory_used_mib_avg",
                        "memory_total_mib",
                        "temperature_c_avg",
                        "power_w_avg",
                    )
                }
                for doc in docs
                if doc["start"] == newest
            }
            await self.store.put_node_status(node, {"minute": newest, "gpus": gpus})

    async def _inventory(self, inventory: NodeInventory) -> None:
        gpus = []
        for gpu in inventory.gpus:
            tier = classify(
                Capability(
                    model=gpu.name, memory_total_mib=gpu.memory_total_mib,
                    pcie_gen_current=gpu.pcie_gen_current, pcie_gen_max=gpu.pcie_gen_max,
                    pcie_width_current=gpu.pcie_width_current, pcie_width_max=gpu.pcie_width_max,
                )
            )  # fmt: skip
            gpus.append({**gpu.model_dump(), "tier": tier.tier, "tier_reasons": list(tier.reasons)})
        await self.store.put_inventory(
            inventory.node,
            {
                "source": inventory.source,
                "gpus": gpus,
                "unavailable_reason": inventory.unavailable_reason,
                "at": inventory.at,
            },
        )

    async def _health_changed(self, change: HealthChange) -> None:
        doc = {
            "health": change.health,
            "previous": change.previous,
            "reasons": list(change.reasons),
            "since": change.at,
            "published": False,
        }
        await self.store.put_health(change.node, doc)
        log.info(
            "node health changed",
            extra={"node": change.node, "health": change.health, "reasons": list(change.reasons)},
        )
        await self._publish_health(change.node, doc)

    async def _publish_health(self, node: str, doc: Document) -> None:
        await publish_event(
            self.broker, NODE_HEALTH,
            NodeHealthChanged(
                node=node, health=doc["health"], previous_health=doc["previous"],
                reasons=tuple(doc["reasons"]), at=aware(doc["since"]),
            ),
            source=self.source, event_id=f"{node}@{aware(doc['since']).isoformat()}",
        )  # fmt: skip
        await self.store.put_health(node, {**doc, "published": True})

    async def republish(self) -> None:
        """Publish what a failure left unpublished: health changes, alert transitions;
        and end the alerts whose rule is gone or disabled (on any replica)."""
        for doc in await self.store.healths():
            if not doc.get("published"):
                await self._publish_health(doc["_id"], {k: v for k, v in doc.items() if k != "_id"})
        await self._alert_retries.sweep(
            all_unpublished=self.store.unfinished_alerts, get=self.store.alert,
            publish=self._publish_pending,
        )  # fmt: skip
        open_alerts = await self.store.firing()
        rules = (
            {doc["_id"]: doc for doc in await self.store.rules(every=True)} if open_alerts else {}
        )
        for alert in open_alerts:
            rule = rules.get(alert["rule_id"])
            if rule is None or not rule.get("enabled", True):
                await self._resolve(alert, now(), alert["value"], _ended_by(rule))

    # --- alerts ---------------------------------------------------------------------

    async def _alert(self, transition: AlertTransition) -> None:
        rule = transition.rule
        if transition.state == "firing":
            doc: Document = {
                "_id": transition.alert_id,
                "rule_id": rule.rule_id,
                "tenant_id": rule.tenant_id,
                "subject_tenant_id": transition.tenant_id,
                "instance_id": transition.instance_id,
                "state": "firing",
                "severity": rule.severity,
                "subject": transition.subject,
                "node": transition.node,
                "metric": rule.metric,
                "comparison": rule.comparison,
                "threshold": rule.threshold,
                "value": transition.value,
                "since": transition.at - timedelta(seconds=rule.duration_s),
                "fired_at": transition.at,
                "resolved_at": None,
                "published_firing": False,
                "published_resolved": False,
            }
            if not await self.store.insert_alert(doc):
                doc = await self.store.alert(transition.alert_id) or doc
            if not doc.get("published_firing"):
                await self._publish_alert(doc, "firing")
            return
        doc = await self.store.alert(transition.alert_id) or {}
        if doc:
            await self._resolve(doc, transition.at, transition.value, None)

    async def _resolve(
        self, doc: Document, at: datetime, value: float, resolution: str | None
    ) -> None:
        """Resolve a firing alert once: by its metric recovering (resolution None), or
        because its rule was deleted or disabled."""
        if doc.get("published_resolved"):
            return
        if doc["state"] != "resolved":
            fields = {"resolved_at": at, "resolved_value": value, "resolution": resolution}
            if not await self.store.resolve_alert(doc["_id"], fields):
                return  # resolved meanwhile (its rule deleted, say): that path publishes it
            doc.update(fields, state="resolved")
        await self._publish_alert(doc, "resolved")

    async def _publish_pending(self, doc: Document) -> None:
        """Publish the transition of an alert that is not out yet, if any."""
        if doc["state"] == "resolved":
            await self._resolve(doc, doc["resolved_at"], doc["resolved_value"], None)
        elif not doc.get("published_firing"):
            await self._publish_alert(doc, "firing")

    async def _publish_alert(self, doc: Document, state: str) -> None:
        at = aware(doc["fired_at"] if state == "firing" else doc["resolved_at"])
        event = AlertStateChanged(
            alert_id=doc["_id"], rule_id=doc["rule_id"], tenant_id=doc.get("tenant_id"),
            state=state,
            severity=doc["severity"], subject=doc["subject"], metric=doc["metric"],
            value=doc["value"] if state == "firing" else doc.get("resolved_value", doc["value"]),
            threshold=doc["threshold"], at=at,
            resolution=doc.get("resolution") if state == "resolved" else None,
        )  # fmt: skip
        try:
            await publish_event(
                self.broker, ALERTS, event, source=self.source, event_id=f"{doc['_id']}:{state}"
            )
        except Exception:
            self._alert_retries.failed(doc["_id"])
            raise
        await self.store.update_alert(doc["_id"], {f"published_{state}": True})
        url = self._webhooks.get(doc["rule_id"])
        if url:
            delivery_id = f"{doc['_id']}:{state}"
            await self.store.insert_delivery(
                {
                    "_id": delivery_id,
                    "rule_id": doc["rule_id"],
                    "url": url,
                    "payload": event.model_dump(mode="json"),
                    "state": "pending",
                    "attempts": 0,
                    "next_at": now(),
                    "last_error": None,
                }
            )
            if self._due_deliveries is not None:
                self._due_deliveries[delivery_id] = now()

    async def deliver_webhooks(self) -> None:
        """Send pending deliveries that are due; back off exponentially on failure.

        The store is scanned for pending deliveries once after a start (a crash
        may have left some); afterwards only this process's own are looked up,
        by id, so the cost does not grow with the history of deliveries.
        """
        at = now()
        if self._due_deliveries is None:
            pending = await self.store.pending_deliveries()
            self._due_deliveries = {d["_id"]: aware(d["next_at"]) for d in pending}
        due = sorted(key for key, next_at in self._due_deliveries.items() if next_at <= at)
        for delivery_id in due:
            delivery = await self.store.delivery(delivery_id)
            if delivery is None or delivery["state"] != "pending":
                self._due_deliveries.pop(delivery_id, None)
                continue
            await self._attempt_delivery(delivery)

    async def _attempt_delivery(self, delivery: Document) -> None:
        assert self._due_deliveries is not None
        delivery_id, attempts = delivery["_id"], delivery["attempts"] + 1
        error = None
        try:
            await self._check_webhook_url(delivery["url"])
            response = await self._http.post(
                delivery["url"],
                json=delivery["payload"],
                headers={"X-Gpucloud-Delivery": delivery_id},
            )
            if response.is_success:
                await self.store.update_delivery(
                    delivery_id, {"state": "delivered", "attempts": attempts, "delivered_at": now()}
                )
                self._due_deliveries.pop(delivery_id, None)
                return
            error = f"HTTP {response.status_code}"
        except (httpx.HTTPError, ValidationFailed) as failure:
            error = f"{type(failure).__name__}: {failure}"[:300]
        fields: Document = {"attempts": attempts, "last_error": error}
        if attempts >= WEBHOOK_ATTEMPTS:
            fields["state"] = "failed"
            self._due_deliveries.pop(delivery_id, None)
        else:
            fields["next_at"] = now() + timedelta(seconds=2 ** (attempts - 1))
            self._due_deliveries[delivery_id] = fields["next_at"]
        await self.store.update_delivery(delivery_id, fields)

    async def _check_webhook_url(self, url: str) -> None:
        parsed = urlparse(url)
        if parsed.scheme not in {"http", "https"} or not parsed.hostname:
            raise ValidationFailed("webhookURL must be an http(s) URL")
        if self.settings.webhook_allow_private_networks:
            return
        try:
            # Resolved off the event loop: a slow resolver must not stall ingestion.
            found = await asyncio.get_running_loop().getaddrinfo(parsed.hostname, None)
            addresses = {str(info[4][0]) for info in found}
        except OSError as error:
            raise ValidationFailed(f"webhookURL host does not resolve: {error}") from error
        for address in addresses:
            ip = ipaddress.ip_address(address)
            if ip.is_private or ip.is_loopback or ip.is_link_local or ip.is_reserved:
                raise ValidationFailed("webhookURL must not point into a private network")

    # --- alert rules (API) ---------------------------------------------------------

    async def reload_rules(self) -> None:
        docs = await self.store.rules(every=True)
        self.rules.set_rules([self._rule(doc) for doc in docs if doc.get("enabled", True)])
        self._webhooks = {doc["_id"]: doc["webhook_url"] for doc in docs if doc.get("webhook_url")}

    @staticmethod
    def _rule(doc: Document) -> Rule:
        return Rule(
            rule_id=doc["_id"], metric=doc["metric"], comparison=doc["comparison"],
            threshold=doc["threshold"], duration_s=doc["duration_s"], severity=doc["severity"],
            tenant_id=doc.get("tenant_id"), node=doc.get("node"),
        )  # fmt: skip

    @staticmethod
    def _rule_view(doc: Document) -> AlertRule:
        return AlertRule(
            rule_id=doc["_id"], tenant_id=doc.get("tenant_id"), name=doc["name"],
            metric=doc["metric"], comparison=doc["comparison"], threshold=doc["threshold"],
            duration_s=doc["duration_s"], severity=doc["severity"], node=doc.get("node"),
            webhook_url=doc.get("webhook_url"), enabled=doc.get("enabled", True),
            created_at=doc["created_at"],
        )  # fmt: skip

    async def create_rule(self, identity: Identity, body: AlertRuleCreate) -> AlertRule:
        identity.require_role("platform-admin", "tenant-admin")
        if body.node is not None and not identity.is_platform_admin:
            raise Forbidden("node rules are fleet rules, for the platform admin")
        if body.webhook_url is not None:
            await self._check_webhook_url(body.webhook_url)
        doc: Document = {
            "_id": f"rule-{secrets.token_hex(6)}",
            "tenant_id": identity.tenant_id,  # None: fleet-wide
            **body.model_dump(),
            "enabled": True,
            "created_by": identity.subject,
            "created_at": now(),
        }
        await self.store.insert_rule(doc)
        await self.reload_rules()
        return self._rule_view(doc)

    async def _owned_rule(self, identity: Identity, rule_id: str) -> Document:
        identity.require_role("platform-admin", "tenant-admin")
        doc = await self.store.rule(rule_id)
        if doc is None or doc.get("tenant_id") != identity.tenant_id:
            raise NotFound(f"alert rule {rule_id!r} not found")
        return doc

    async def list_rules(self, identity: Identity) -> list[AlertRule]:
        identity.require_role("platform-admin", "tenant-admin")
        return [self._rule_view(doc) for doc in await self.store.rules(identity.tenant_id)]

    async def get_rule(self, identity: Identity, rule_id: str) -> AlertRule:
        return self._rule_view(await self._owned_rule(identity, rule_id))

    async def update_rule(
        self, identity: Identity, rule_id: str, body: AlertRuleUpdate
    ) -> AlertRule:
        doc = await self._owned_rule(identity, rule_id)
        changes = body.model_dump(exclude_unset=True)
        if changes.get("webhook_url"):
            await self._check_webhook_url(changes["webhook_url"])
        doc.update(changes)
        await self.store.replace_rule(doc)
        await self.reload_rules()
        if not doc.get("enabled", True):
            await self._end_alerts_of(rule_id, _ended_by(doc))
        return self._rule_view(doc)

    async def delete_rule(self, identity: Identity, rule_id: str) -> None:
        await self._owned_rule(identity, rule_id)
        await self.store.delete_rule(rule_id)
        await self.reload_rules()
        await self._end_alerts_of(rule_id, _ended_by(None))

    async def _end_alerts_of(self, rule_id: str, resolution: str) -> None:
        """A rule that is gone cannot see its alerts recover: they end now. (Replicas
        that missed this see it in their republish sweep.)"""
        for alert in await self.store.firing():
            if alert["rule_id"] == rule_id:
                await self._resolve(alert, now(), alert["value"], resolution)

    async def list_alerts(self, identity: Identity, state: str | None, limit: int) -> list[Alert]:
        query: Document = {}
        if not identity.is_platform_admin:
            # A tenant sees the alerts of its own rules, and fleet alerts about its GPUs.
            tenant = identity.require_tenant()
            query["$or"] = [{"tenant_id": tenant}, {"subject_tenant_id": tenant}]
        if state:
            query["state"] = state
        return [
            Alert(
                alert_id=doc["_id"],
                rule_id=doc["rule_id"],
                state=doc["state"],
                severity=doc["severity"],
                subject=doc["subject"],
                node=doc["node"],
                instance_id=doc.get("instance_id"),
                metric=doc["metric"],
                comparison=doc["comparison"],
                threshold=doc["threshold"],
                value=doc["value"],
                fired_at=doc["fired_at"],
                resolved_at=doc.get("resolved_at"),
                resolution=doc.get("resolution"),
            )
            for doc in await self.store.alerts(query, limit)
        ]

    # --- queries --------------------------------------------------------------------

    async def refresh_nodes(self) -> None:
        """Zone and GPU type per node, from the cluster's node labels."""
        nodes, _ = await self.kube.list("Node")
        self.node_labels = {
            node["metadata"]["name"]: node["metadata"].get("labels", {}) for node in nodes
        }

    async def gpus(self, identity: Identity) -> list[GpuView]:
        statuses = {doc["_id"]: doc for doc in await self.store.node_statuses()}
        healths = {doc["_id"]: doc for doc in await self.store.healths()}
        views = []
        for inventory in await self.store.inventories():
            node = inventory["_id"]
            current = statuses.get(node, {}).get("gpus", {})
            for gpu in inventory["gpus"]:
                status = current.get(gpu["gpu_uuid"], {})
                if not identity.is_platform_admin and status.get("tenant_id") != identity.tenant_id:
                    continue
                views.append(
                    GpuView(
                        gpu_uuid=gpu["gpu_uuid"],
                        node=node,
                        index=gpu["index"],
                        name=gpu["name"],
                        tier=gpu["tier"],
                        tier_reasons=gpu["tier_reasons"],
                        memory_total_mib=gpu["memory_total_mib"],
                        health=healths.get(node, {}).get("health", "healthy"),
                        instance_id=status.get("instance_id"),
                        tenant_id=status.get("tenant_id") if identity.is_platform_admin else None,
                        utilization_gpu_pct=status.get("utilization_gpu_pct_avg"),
                        temperature_c=status.get("temperature_c_avg"),
                        **(
                            {
                                k: gpu.get(k)
                                for k in (
                                    "serial",
                                    "driver_version",
                                    "cuda_version",
                                    "pcie_gen_current",
                                    "pcie_width_current",
                                    "mig_mode",
                                    "nvlink_links_active",
                                )
                            }
                            if identity.is_platform_admin
                            else {}
                        ),
                    )
                )
        return views

    async def gpu_metrics(
        self, identity: Identity, gpu_uuid: str, start: datetime, end: datetime, resolution: str
    ) -> MetricSeries:
        query: Document = {"gpu_uuid": gpu_uuid}
        if not identity.is_platform_admin:
            query["tenant_id"] = identity.require_tenant()
        docs = await self._series(query, start, end, resolution)
        if not docs and not identity.is_platform_admin:
            raise NotFound(f"no metrics of GPU {gpu_uuid!r} for this tenant")
        return self._points(gpu_uuid, resolution, docs)

    async def instance_metrics(
        self, identity: Identity, instance_id: str, start: datetime, end: datetime,
        resolution: str, tenant_id: str | None,
    ) -> MetricSeries:  # fmt: skip
        if identity.is_platform_admin:
            if tenant_id is None:
                raise ValidationFailed("the platform admin names the instance's tenantID")
        else:
            tenant_id = identity.require_tenant()
        docs = await self._series(
            {"tenant_id": tenant_id, "instance_id": instance_id}, start, end, resolution
        )
        if not docs:
            raise NotFound(f"no metrics of instance {instance_id!r}")
        return self._points(instance_id, resolution, docs)

    async def tenant_metrics(
        self, identity: Identity, start: datetime, end: datetime, resolution: str,
        tenant_id: str | None,
    ) -> MetricSeries:  # fmt: skip
        if not identity.is_platform_admin:
            tenant_id = identity.require_tenant()
        elif tenant_id is None:
            raise ValidationFailed("the platform admin names the tenantID")
        docs = await self._series({"tenant_id": tenant_id}, start, end, resolution)
        return self._points(tenant_id or "", resolution, docs)

    async def node_metrics(
        self, identity: Identity, node: str, start: datetime, end: datetime, resolution: str
    ) -> MetricSeries:
        identity.require_role("platform-admin")
        docs = await self._series({"node": node}, start, end, resolution)
        if not docs:
            raise NotFound(f"no metrics of node {node!r}")
        return self._points(node, resolution, docs)

    async def _series(
        self, query: Document, start: datetime, end: datetime, resolution: str
    ) -> list[Document]:
        if end <= start:
            raise ValidationFailed("end must be after start")
        if resolution == "1m" and end - start > timedelta(days=2):
            raise ValidationFailed("at 1m, ask for at most 2 days; use resolution=1h")
        collection = MINUTES if resolution == "1m" else HOURS
        return await self.store.series(collection, query, start, end, limit=50_000)

    @staticmethod
    def _points(subject: str, resolution: str, docs: list[Document]) -> MetricSeries:
        """One point per window: GPUs averaged (a node's, a tenant's), maxima kept."""
        by_start: dict[datetime, list[Document]] = defaultdict(list)
        for doc in docs:
            by_start[aware(doc["start"])].append(doc)
        points = []
        for start, group in sorted(by_start.items()):
            averaged: dict[str, Any] = {
                name: round(sum(d[f"{name}_avg"] for d in group) / len(group), 3) for name in SERIES
            }
            points.append(
                MetricPoint(
                    start=start,
                    gpus=len({d["gpu_uuid"] for d in group}),
                    utilization_gpu_pct=averaged["utilization_gpu_pct"],
                    utilization_gpu_pct_max=max(d["utilization_gpu_pct_max"] for d in group),
                    utilization_memory_pct=averaged["utilization_memory_pct"],
                    memory_used_mib=averaged["memory_used_mib"],
                    temperature_c=averaged["temperature_c"],
                    temperature_c_max=max(d["temperature_c_max"] for d in group),
                    power_w=averaged["power_w"],
                    ecc_uncorrected=max(d["ecc_uncorrected"] for d in group),
                    xids=sorted({x for d in group for x in d["xids"]}),
                )
            )
        return MetricSeries(subject=subject, resolution=resolution, points=points)

    async def nodes(self, identity: Identity) -> list[NodeView]:
        identity.require_role("platform-admin")
        views, _ = await self._node_views()
        return views

    async def _node_views(self) -> tuple[list[NodeView], list[Document]]:
        """Every node's view, and the inventories they were built from."""
        inventories = {doc["_id"]: doc for doc in await self.store.inventories()}
        healths = {doc["_id"]: doc for doc in await self.store.healths()}
        statuses = {doc["_id"]: doc for doc in await self.store.node_statuses()}
        names = sorted(set(inventories) | set(healths))
        views = []
        for name in names:
            gpus = inventories.get(name, {}).get("gpus", [])
            current = statuses.get(name, {}).get("gpus", {}).values()
            labels = self.node_labels.get(name, {})
            views.append(
                NodeView(
                    node=name,
                    zone=labels.get(ZONE_LABEL),
                    gpu_type=labels.get(GPU_PRODUCT_LABEL) or (gpus[0]["name"] if gpus else None),
                    gpus=len(gpus),
                    tiers=sorted({gpu["tier"] for gpu in gpus}),
                    health=healths.get(name, {}).get("health", "healthy"),
                    health_reasons=healths.get(name, {}).get("reasons", []),
                    health_since=healths.get(name, {}).get("since"),
                    gpus_in_use=sum(1 for gpu in current if gpu.get("instance_id")),
                    utilization_gpu_pct=round(
                        sum(g["utilization_gpu_pct_avg"] for g in current) / len(current), 1
                    )
                    if current
                    else None,
                    telemetry=inventories.get(name, {}).get("source"),
                    unavailable_reason=inventories.get(name, {}).get("unavailable_reason"),
                )
            )
        return views, list(inventories.values())

    async def release_node(self, identity: Identity, node: str) -> NodeView:
        """Ask the consumer that owns the node's health to release it (it applies the
        request in order with the node's telemetry); the node as it is now."""
        identity.require_role("platform-admin")
        found = [view for view in await self.nodes(identity) if view.node == node]
        if not found:
            raise NotFound(f"node {node!r} not found")
        await publish_event(
            self.broker, TELEMETRY,
            NodeReleaseRequested(node=node, requested_by=identity.subject, at=now()),
            source=self.source,
        )  # fmt: skip
        return found[0]

    async def fleet(self, identity: Identity) -> FleetSummary:
        identity.require_role("platform-admin")
        nodes, inventories = await self._node_views()
        groups: dict[tuple[str, str], list[NodeView]] = defaultdict(list)
        for node in nodes:
            groups[(node.zone or "unknown", node.gpu_type or "unknown")].append(node)
        tiers: dict[str, int] = defaultdict(int)
        for inventory in inventories:
            for gpu in inventory["gpus"]:
                tiers[gpu["tier"]] += 1
        health: dict[str, int] = defaultdict(int)
        for node in nodes:
            health[node.health] += 1
        return FleetSummary(
            nodes=len(nodes),
            gpus=sum(node.gpus for node in nodes),
            gpus_in_use=sum(node.gpus_in_use for node in nodes),
            by_tier=dict(tiers),
            by_health=dict(health),
            groups=[
                FleetGroup(
                    zone=zone,
                    gpu_type=gpu_type,
                    nodes=len(members),
                    gpus=sum(m.gpus for m in members),
                    gpus_in_use=sum(m.gpus_in_use for m in members),
                    utilization_gpu_pct=_weighted(members),
                    quarantined_nodes=sum(1 for m in members if m.health == "quarantined"),
                )
                for (zone, gpu_type), members in sorted(groups.items())
            ],
        )

    async def retention(self) -> None:
        at = now()
        await self.store.drop_older(MINUTES, at - timedelta(hours=self.settings.minute_retention_h))
        await self.store.drop_older(HOURS, at - timedelta(days=self.settings.hour_retention_days))


def _ended_by(rule: Document | None) -> str:
    return "rule_deleted" if rule is None else "rule_disabled"


def _weighted(members: list[NodeView]) -> float | None:
    reporting = [m for m in members if m.utilization_gpu_pct is not None]
    gpus = sum(m.gpus for m in reporting)
    if not gpus:
        return None
    return round(sum((m.utilization_gpu_pct or 0) * m.gpus for m in reporting) / gpus, 1)
