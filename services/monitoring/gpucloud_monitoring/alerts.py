"""Alerts: the rule engine's transitions, stored once, published once each, and listed.

An alert's id comes from its rule, GPU and episode, so a replayed batch finds
the same alert. A firing alert is resolved by its metric recovering or by its
rule going away; a conditional update makes that happen once.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from faststream.kafka import KafkaBroker

from gpucloud_libs.clock import aware, now
from gpucloud_libs.events import AlertStateChanged
from gpucloud_libs.identity import Identity
from gpucloud_libs.kafka import publish_event
from gpucloud_libs.mongo import Document
from gpucloud_libs.outbox import PublishRetries
from gpucloud_libs.topics import ALERTS

from .documents import AlertDoc, RuleDoc
from .rules import AlertTransition, RuleEngine
from .schemas import Alert
from .store import MonitoringStore
from .webhooks import Webhooks


def ended_by(rule: RuleDoc | None) -> str:
    """The resolution of an alert whose rule is gone (None) or disabled."""
    return "rule_deleted" if rule is None else "rule_disabled"


class Alerts:
    def __init__(
        self,
        store: MonitoringStore,
        broker: KafkaBroker,
        engine: RuleEngine,
        webhooks: Webhooks,
        *,
        source: str,
    ) -> None:
        self._store = store
        self._broker = broker
        self._engine = engine
        self._webhooks = webhooks
        self._source = source
        #: Alerts whose transition failed to publish: the sweep retries only these
        #: (after its first pass), never a publish still in flight.
        self._retries = PublishRetries()

    async def restore(self) -> None:
        """The engine's firing episodes after a start, from the stored alerts."""
        for alert in await self._store.firing():
            self._engine.restore_firing(
                alert["rule_id"], alert["subject"], alert["_id"], aware(alert["since"])
            )

    async def observe(self, transition: AlertTransition) -> None:
        rule = transition.rule
        if transition.state == "firing":
            doc: AlertDoc = {
                "_id": transition.alert_id,
                "rule_id": rule.rule_id,
                "tenant_id": rule.tenant_id,
                "subject_tenant_id": transition.tenant_id,
                "instance_id": transition.instance_id,
                "action": rule.action,
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
            if not await self._store.insert_alert(doc):
                doc = await self._store.alert(transition.alert_id) or doc
            if not doc.get("published_firing"):
                await self._publish_alert(doc, "firing")
            return
        found = await self._store.alert(transition.alert_id)
        if found is not None:
            await self.resolve(found, transition.at, transition.value, None)

    async def resolve(
        self, doc: AlertDoc, at: datetime, value: float, resolution: str | None
    ) -> None:
        """Resolve a firing alert once: by its metric recovering (resolution None), or
        because its rule was deleted or disabled."""
        if doc.get("published_resolved"):
            return
        if doc["state"] != "resolved":
            fields = {"resolved_at": at, "resolved_value": value, "resolution": resolution}
            if not await self._store.resolve_alert(doc["_id"], fields):
                return  # resolved meanwhile (its rule deleted, say): that path publishes it
            doc["state"], doc["resolved_at"] = "resolved", at
            doc["resolved_value"], doc["resolution"] = value, resolution
        await self._publish_alert(doc, "resolved")

    async def _publish_pending(self, doc: AlertDoc) -> None:
        """Publish the transition of an alert that is not out yet, if any."""
        if doc["state"] == "resolved":
            # Stored resolved, so resolved_at and resolved_value are set.
            resolved_at = doc["resolved_at"] or doc["fired_at"]
            await self.resolve(doc, resolved_at, doc.get("resolved_value", doc["value"]), None)
        elif not doc.get("published_firing"):
            await self._publish_alert(doc, "firing")

    async def _publish_alert(self, doc: AlertDoc, state: str) -> None:
        at = aware(
            doc["resolved_at"] or doc["fired_at"] if state == "resolved" else doc["fired_at"]
        )
        event = AlertStateChanged(
            alert_id=doc["_id"], rule_id=doc["rule_id"], tenant_id=doc.get("tenant_id"),
            state=state,
            severity=doc["severity"], subject=doc["subject"], metric=doc["metric"],
            value=doc["value"] if state == "firing" else doc.get("resolved_value", doc["value"]),
            threshold=doc["threshold"], at=at,
            resolution=doc.get("resolution") if state == "resolved" else None,
            action=doc.get("action", "notify"), instance_id=doc.get("instance_id"),
        )  # fmt: skip
        try:
            await publish_event(
                self._broker, ALERTS, event, source=self._source, event_id=f"{doc['_id']}:{state}"
            )
        except Exception:
            self._retries.failed(doc["_id"])
            raise
        await self._store.update_alert(doc["_id"], {f"published_{state}": True})
        await self._webhooks.enqueue(
            doc["rule_id"], f"{doc['_id']}:{state}", event.model_dump(mode="json")
        )

    async def sweep(self) -> None:
        """Publish what a failure left unpublished, and end the alerts whose rule is gone
        or disabled (a replica that missed the rule change sees it here)."""
        await self._retries.sweep(
            all_unpublished=self._store.unfinished_alerts, get=self._store.alert,
            publish=self._publish_pending,
        )  # fmt: skip
        open_alerts = await self._store.firing()
        rules = (
            {doc["_id"]: doc for doc in await self._store.rules(every=True)} if open_alerts else {}
        )
        for alert in open_alerts:
            rule = rules.get(alert["rule_id"])
            if rule is None or not rule.get("enabled", True):
                await self.resolve(alert, now(), alert["value"], ended_by(rule))

    async def end_alerts_of(self, rule_id: str, resolution: str) -> None:
        """A rule that is gone cannot see its alerts recover: they end now. (Replicas
        that missed this see it in their republish sweep.)"""
        for alert in await self._store.firing():
            if alert["rule_id"] == rule_id:
                await self.resolve(alert, now(), alert["value"], resolution)

    async def list(
        self, identity: Identity, state: str | None, limit: int, *, rule_id: str | None = None,
        seen: Document | None = None,
    ) -> list[Alert]:  # fmt: skip
        """`seen`: the condition for the workloads whose alerts the caller sees
        (`WorkloadProjects.seen_match`); alerts of no workload show to the whole tenant."""
        query: Document = {}
        if not identity.is_platform_admin:
            # A tenant sees the alerts of its own rules, and fleet alerts about its GPUs.
            tenant = identity.require_tenant()
            query["$or"] = [{"tenant_id": tenant}, {"subject_tenant_id": tenant}]
        if seen:
            query["$and"] = [{"$or": [{"instance_id": None}, seen]}]
        if state:
            query["state"] = state
        if rule_id:
            query["rule_id"] = rule_id
        return [
            Alert(
                alert_id=doc["_id"],
                rule_id=doc["rule_id"],
                state=doc["state"],
                severity=doc["severity"],
                subject=doc["subject"],
                node=doc["node"],
                instance_id=doc.get("instance_id"),
                action=doc.get("action", "notify"),
                metric=doc["metric"],
                comparison=doc["comparison"],
                threshold=doc["threshold"],
                value=doc["value"],
                fired_at=doc["fired_at"],
                resolved_at=doc.get("resolved_at"),
                resolution=doc.get("resolution"),
            )
            for doc in await self._store.alerts(query, limit)
        ]
