"""All MongoDB access of the monitoring service.

Writers: the telemetry consumer writes roll-ups, node status, inventory, health
and alerts (each node's events arrive on one partition, so one consumer owns a
node's documents); the API writes alert rules and operator health releases.
Retention is done here, by age (the test database has no TTL indexes).
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import datetime

from pymongo import ASCENDING, IndexModel
from pymongo.errors import BulkWriteError, DuplicateKeyError

from gpucloud_libs.mongo import Collection, Database, Document, IndexPlan, typed

from .documents import (
    AlertDoc,
    DeliveryDoc,
    HealthDoc,
    HealthFields,
    InventoryDoc,
    InventoryFields,
    NodeStatusDoc,
    NodeStatusFields,
    RollupDoc,
    RuleDoc,
)

MINUTES = "rollups_minute"
HOURS = "rollups_hour"
NODES = "nodes"
INVENTORY = "inventory"
#: Other clusters' nodes, by cluster (other_clusters.py).
CLUSTER_NODES = "cluster_nodes"
HEALTH = "health"
RULES = "alert_rules"
ALERTS = "alerts"
DELIVERIES = "webhook_deliveries"
#: The project each workload runs in, by `<tenant>/<telemetry id>` (decision 142).
WORKLOAD_PROJECTS = "workload_projects"

INDEXES: IndexPlan = {
    MINUTES: [
        IndexModel([("gpu_uuid", ASCENDING), ("start", ASCENDING)], name="gpu_start"),
        IndexModel([("tenant_id", ASCENDING), ("start", ASCENDING)], name="tenant_start"),
        IndexModel([("node", ASCENDING), ("start", ASCENDING)], name="node_start"),
        IndexModel([("start", ASCENDING)], name="start"),
    ],
    HOURS: [
        IndexModel([("gpu_uuid", ASCENDING), ("start", ASCENDING)], name="gpu_start"),
        IndexModel([("start", ASCENDING)], name="start"),
    ],
    WORKLOAD_PROJECTS: [
        IndexModel([("tenant_id", ASCENDING), ("project", ASCENDING)], name="tenant_project"),
    ],
    ALERTS: [
        IndexModel([("tenant_id", ASCENDING), ("fired_at", ASCENDING)], name="tenant_fired"),
        IndexModel([("rule_id", ASCENDING), ("fired_at", ASCENDING)], name="rule_fired"),
        # Every sweep ends the firing alerts of rules gone (service.republish).
        IndexModel([("state", ASCENDING)], name="state"),
    ],
}


class MonitoringStore:
    def __init__(self, db: Database) -> None:
        self._rollups: dict[str, Collection[RollupDoc]] = {
            name: typed(db, name, RollupDoc) for name in (MINUTES, HOURS)
        }
        self._nodes = typed(db, NODES, NodeStatusDoc)
        self._inventory = typed(db, INVENTORY, InventoryDoc)
        self._health = typed(db, HEALTH, HealthDoc)
        self._rules = typed(db, RULES, RuleDoc)
        self._alerts = typed(db, ALERTS, AlertDoc)
        self._deliveries = typed(db, DELIVERIES, DeliveryDoc)
        self._cluster_nodes = db[CLUSTER_NODES]
        self._workload_projects = db[WORKLOAD_PROJECTS]

    # --- the project of each workload (decision 142) -------------------------------

    async def record_projects(self, found: dict[tuple[str, str], str]) -> None:
        """Record (tenant, telemetry id) -> project; a workload's project never changes,
        so a replay writes the same."""
        await asyncio.gather(*(
            self._workload_projects.update_one(
                {"_id": f"{tenant_id}/{workload}"},
                {"$set": {"tenant_id": tenant_id, "workload": workload, "project": project}},
                upsert=True,
            )
            for (tenant_id, workload), project in found.items()
        ))  # fmt: skip

    async def workload_project(self, tenant_id: str, workload: str) -> str | None:
        doc = await self._workload_projects.find_one({"_id": f"{tenant_id}/{workload}"})
        return None if doc is None else str(doc["project"])

    async def workloads_in(self, tenant_id: str, projects: tuple[str, ...]) -> list[str]:
        """The telemetry ids of the tenant's workloads of these projects."""
        found = self._workload_projects.find(
            {"tenant_id": tenant_id, "project": {"$in": list(projects)}}, {"workload": 1}
        )
        return [str(doc["workload"]) async for doc in found]

    async def forget_tenant_projects(self, tenant_id: str) -> None:
        await self._workload_projects.delete_many({"tenant_id": tenant_id})

    # --- roll-ups -------------------------------------------------------------------

    async def insert_rollups(self, collection: str, docs: list[RollupDoc]) -> None:
        """Insert closed windows; a replayed window is a duplicate key, kept as first written."""
        if not docs:
            return
        try:
            await self._rollups[collection].insert_many(docs, ordered=False)
        except BulkWriteError as error:
            if any(e.get("code") != 11000 for e in error.details.get("writeErrors", [])):
                raise

    async def series(
        self,
        collection: str,
        query: Document,
        start: datetime,
        end: datetime,
        limit: int,
    ) -> list[RollupDoc]:
        found = self._rollups[collection].find({**query, "start": {"$gte": start, "$lt": end}})
        return [doc async for doc in found.sort("start", ASCENDING).limit(limit)]

    async def drop_older(self, collection: str, cutoff: datetime) -> int:
        result = await self._rollups[collection].delete_many({"start": {"$lt": cutoff}})
        return result.deleted_count

    # --- nodes: status, inventory, health -------------------------------------------

    async def put_node_status(self, node: str, fields: NodeStatusFields) -> None:
        doc: NodeStatusDoc = {"_id": node, **fields}
        await self._nodes.replace_one({"_id": node}, doc, upsert=True)

    async def node_statuses(self) -> dict[str, NodeStatusDoc]:
        return {doc["_id"]: doc async for doc in self._nodes.find({})}

    async def put_inventory(self, node: str, fields: InventoryFields) -> None:
        doc: InventoryDoc = {"_id": node, **fields}
        await self._inventory.replace_one({"_id": node}, doc, upsert=True)

    async def inventory(self, node: str) -> InventoryDoc | None:
        return await self._inventory.find_one({"_id": node})

    async def inventories(self) -> dict[str, InventoryDoc]:
        return {doc["_id"]: doc async for doc in self._inventory.find({})}

    async def put_cluster_nodes(self, cluster: str, nodes: list[str]) -> None:
        if nodes:
            doc = {"_id": cluster, "nodes": nodes}
            await self._cluster_nodes.replace_one({"_id": cluster}, doc, upsert=True)
        else:
            await self._cluster_nodes.delete_one({"_id": cluster})

    async def cluster_nodes(self) -> dict[str, list[str]]:
        return {doc["_id"]: doc["nodes"] async for doc in self._cluster_nodes.find({})}

    async def put_health(self, node: str, fields: HealthFields) -> None:
        doc: HealthDoc = {"_id": node, **fields}
        await self._health.replace_one({"_id": node}, doc, upsert=True)

    async def healths(self) -> dict[str, HealthDoc]:
        return {doc["_id"]: doc async for doc in self._health.find({})}

    # --- alert rules and alerts -----------------------------------------------------

    async def insert_rule(self, doc: RuleDoc) -> None:
        await self._rules.insert_one(doc)

    async def rule(self, rule_id: str) -> RuleDoc | None:
        return await self._rules.find_one({"_id": rule_id})

    async def rules(self, tenant_id: str | None = None, *, every: bool = False) -> list[RuleDoc]:
        query: Document = {} if every else {"tenant_id": tenant_id}
        return [doc async for doc in self._rules.find(query).sort("_id", ASCENDING)]

    async def replace_rule(self, doc: RuleDoc) -> None:
        await self._rules.replace_one({"_id": doc["_id"]}, doc)

    async def delete_rule(self, rule_id: str) -> None:
        await self._rules.delete_one({"_id": rule_id})

    async def insert_alert(self, doc: AlertDoc) -> bool:
        try:
            await self._alerts.insert_one(doc)
        except DuplicateKeyError:
            return False
        return True

    async def alert(self, alert_id: str) -> AlertDoc | None:
        return await self._alerts.find_one({"_id": alert_id})

    async def update_alert(self, alert_id: str, fields: Document) -> None:
        await self._alerts.update_one({"_id": alert_id}, {"$set": fields})

    async def resolve_alert(self, alert_id: str, fields: Document) -> bool:
        """Resolve a firing alert; False if something else resolved it first."""
        result = await self._alerts.update_one(
            {"_id": alert_id, "state": "firing"}, {"$set": {**fields, "state": "resolved"}}
        )
        return result.modified_count == 1

    async def alerts(self, query: Document, limit: int) -> list[AlertDoc]:
        found = self._alerts.find(query).sort("fired_at", -1).limit(limit)
        return [doc async for doc in found]

    async def firing(self) -> list[AlertDoc]:
        return [doc async for doc in self._alerts.find({"state": "firing"})]

    async def unfinished_alerts(self) -> list[AlertDoc]:
        """Firing, or resolved with the resolution not yet published."""
        return [doc async for doc in self._alerts.find({"published_resolved": False})]

    # --- webhook deliveries ---------------------------------------------------------

    async def insert_delivery(self, doc: DeliveryDoc) -> None:
        with contextlib.suppress(DuplicateKeyError):  # a replay: the first record stands
            await self._deliveries.insert_one(doc)

    async def pending_deliveries(self) -> list[DeliveryDoc]:
        return [doc async for doc in self._deliveries.find({"state": "pending"})]

    async def delivery(self, delivery_id: str) -> DeliveryDoc | None:
        return await self._deliveries.find_one({"_id": delivery_id})

    async def update_delivery(self, delivery_id: str, fields: Document) -> None:
        await self._deliveries.update_one({"_id": delivery_id}, {"$set": fields})
