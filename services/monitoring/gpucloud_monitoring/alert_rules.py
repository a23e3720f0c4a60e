"""Alert rules: fleet rules (platform admin) and tenant rules, with optional webhooks.

The engine evaluates the enabled rules in-stream; every replica reloads them
from the store each few seconds, so a change on one reaches all.
"""

from __future__ import annotations

import secrets

from gpucloud_libs.clock import now
from gpucloud_libs.errors import Conflict, Forbidden, NotFound, QuotaExceeded, ValidationFailed
from gpucloud_libs.identity import Identity
from gpucloud_libs.outbound_guard import OutboundGuard

from .alerts import Alerts, ended_by
from .documents import RuleDoc
from .rules import Rule, RuleEngine
from .schemas import AlertRule, AlertRuleCreate, AlertRuleUpdate
from .store import MonitoringStore
from .webhook_secrets import WebhookSecrets
from .webhooks import Webhooks


def rule_of(doc: RuleDoc) -> Rule:
    return Rule(
        rule_id=doc["_id"], metric=doc["metric"], comparison=doc["comparison"],
        threshold=doc["threshold"], duration_s=doc["duration_s"], severity=doc["severity"],
        tenant_id=doc.get("tenant_id"), node=doc.get("node"),
        action=doc.get("action", "notify"),
    )  # fmt: skip


def rule_view(doc: RuleDoc, *, new_secret: str | None = None) -> AlertRule:
    return AlertRule(
        rule_id=doc["_id"], tenant_id=doc.get("tenant_id"), name=doc["name"],
        metric=doc["metric"], comparison=doc["comparison"], threshold=doc["threshold"],
        duration_s=doc["duration_s"], severity=doc["severity"], node=doc.get("node"),
        webhook_url=doc.get("webhook_url"), webhook_secret=new_secret,
        enabled=doc.get("enabled", True), created_at=doc["created_at"],
        action=doc.get("action", "notify"),
    )  # fmt: skip


class AlertRules:
    def __init__(
        self,
        store: MonitoringStore,
        engine: RuleEngine,
        alerts: Alerts,
        webhooks: Webhooks,
        guard: OutboundGuard,
        webhook_secrets: WebhookSecrets,
        *,
        max_per_tenant: int,
    ) -> None:
        self._store = store
        self._engine = engine
        self._alerts = alerts
        self._webhooks = webhooks
        self._guard = guard
        self._secrets = webhook_secrets
        self._max_per_tenant = max_per_tenant

    async def reload(self) -> None:
        docs = await self._store.rules(every=True)
        self._engine.set_rules([rule_of(doc) for doc in docs if doc.get("enabled", True)])
        self._webhooks.set_targets(
            {
                doc["_id"]: (url, doc.get("webhook_secret"))
                for doc in docs
                if (url := doc["webhook_url"])
            }
        )

    async def create(self, identity: Identity, body: AlertRuleCreate) -> AlertRule:
        identity.require_role("platform-admin", "tenant-admin")
        if body.node is not None and not identity.is_platform_admin:
            raise Forbidden("node rules are fleet rules, for the platform admin")
        if body.action == "stop_instance" and (
            identity.tenant_id is None or body.comparison not in {"<", "<="}
        ):
            raise ValidationFailed(
                "stop_instance is stop-when-idle: a tenant rule with `<` or `<=` "
                "(the platform admin stops nothing of a tenant's this way)"
            )
        if body.webhook_url is not None:
            await self._guard.check(body.webhook_url)
        if identity.tenant_id is not None:  # fleet rules are the operator's, uncapped
            await self._check_room(identity.tenant_id)
        doc: RuleDoc = {
            "_id": f"rule-{secrets.token_hex(6)}",
            "tenant_id": identity.tenant_id,  # None: fleet-wide
            "name": body.name,
            "metric": body.metric,
            "comparison": body.comparison,
            "threshold": body.threshold,
            "duration_s": body.duration_s,
            "severity": body.severity,
            "node": body.node,
            "webhook_url": body.webhook_url,
            "action": body.action,
            "enabled": True,
            "created_by": identity.subject,
            "created_at": now(),
        }
        secret = self._give_secret(doc) if body.webhook_url else None
        await self._store.insert_rule(doc)
        await self.reload()
        return rule_view(doc, new_secret=secret)

    def _give_secret(self, doc: RuleDoc) -> str:
        """A new signing secret for the rule's webhook: sealed on `doc`, returned in clear."""
        secret, doc["webhook_secret"] = self._secrets.new()
        return secret

    async def rotate_secret(self, identity: Identity, rule_id: str) -> AlertRule:
        """A new signing secret, in force for every delivery enqueued from now on."""
        doc = await self._owned(identity, rule_id)
        if not doc["webhook_url"]:
            raise Conflict(f"alert rule {rule_id!r} has no webhook to sign for")
        secret = self._give_secret(doc)
        await self._store.replace_rule(doc)
        await self.reload()
        return rule_view(doc, new_secret=secret)

    async def _check_room(self, tenant_id: str) -> None:
        held = len(await self._store.rules(tenant_id))
        if held >= self._max_per_tenant:
            raise QuotaExceeded(
                f"a tenant may hold {self._max_per_tenant} alert rules; delete one first",
                limit="max_rules_per_tenant", limit_value=self._max_per_tenant, in_use=held,
            )  # fmt: skip

    async def _owned(self, identity: Identity, rule_id: str) -> RuleDoc:
        identity.require_role("platform-admin", "tenant-admin")
        doc = await self._store.rule(rule_id)
        if doc is None or doc.get("tenant_id") != identity.tenant_id:
            raise NotFound(f"alert rule {rule_id!r} not found")
        return doc

    async def list(self, identity: Identity) -> list[AlertRule]:
        identity.require_role("platform-admin", "tenant-admin")
        return [rule_view(doc) for doc in await self._store.rules(identity.tenant_id)]

    async def get(self, identity: Identity, rule_id: str) -> AlertRule:
        return rule_view(await self._owned(identity, rule_id))

    async def update(self, identity: Identity, rule_id: str, body: AlertRuleUpdate) -> AlertRule:
        doc = await self._owned(identity, rule_id)
        secret = None
        if "webhook_url" in body.model_fields_set:
            if body.webhook_url:
                await self._guard.check(body.webhook_url)
            doc["webhook_url"] = body.webhook_url  # None removes the webhook
            if not body.webhook_url:
                doc["webhook_secret"] = None
            elif not doc.get("webhook_secret"):  # a receiver keeps its secret across URLs
                secret = self._give_secret(doc)
        if body.name is not None:
            doc["name"] = body.name
        if body.threshold is not None:
            doc["threshold"] = body.threshold
        if body.duration_s is not None:
            doc["duration_s"] = body.duration_s
        if body.severity is not None:
            doc["severity"] = body.severity
        if body.enabled is not None:
            doc["enabled"] = body.enabled
        await self._store.replace_rule(doc)
        await self.reload()
        if not doc.get("enabled", True):
            await self._alerts.end_alerts_of(rule_id, ended_by(doc))
        return rule_view(doc, new_secret=secret)

    async def delete(self, identity: Identity, rule_id: str) -> None:
        await self._owned(identity, rule_id)
        await self._store.delete_rule(rule_id)
        await self.reload()
        await self._alerts.end_alerts_of(rule_id, ended_by(None))

    async def forget_tenant(self, tenant_id: str) -> None:
        """A deleted tenant's rules go, and their open alerts end: nothing of it is
        evaluated on every sample, nor sent to its webhooks, any more. Its alert
        history stays, as its bills do."""
        rules = await self._store.rules(tenant_id)
        for doc in rules:
            await self._store.delete_rule(doc["_id"])
        if rules:
            await self.reload()
        for doc in rules:
            await self._alerts.end_alerts_of(doc["_id"], ended_by(None))
