"""HTTP routes of the monitoring service. Callers come through the gateway, which
signs their identity. A tenant sees only the GPUs and minutes of its own
instances; nodes, the fleet summary and fleet rules are the platform admin's."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Query, Response, status

from gpucloud_libs.errors import Forbidden, Unauthenticated
from gpucloud_libs.http import CurrentIdentity, app_part
from gpucloud_libs.identity import Identity

from .alert_rules import AlertRules
from .alerts import Alerts
from .fleet import Fleet
from .metrics import Metrics, Workload
from .node_keys import NodeKeys
from .schemas import (
    Alert,
    AlertRule,
    AlertRuleCreate,
    AlertRuleUpdate,
    Capacity,
    FleetSummary,
    GpuView,
    MetricSeries,
    NodeKey,
    NodeQuarantine,
    NodeView,
    Resolution,
)
from .workload_projects import WorkloadProjects

router = APIRouter()

Start = Annotated[datetime | None, Query(description="Default: an hour before `end`")]
End = Annotated[datetime | None, Query(description="Default: now")]
TenantParam = Annotated[str | None, Query(alias="tenantID", max_length=64)]


MetricsPart = Annotated[Metrics, app_part(Metrics)]
FleetPart = Annotated[Fleet, app_part(Fleet)]
AlertRulesPart = Annotated[AlertRules, app_part(AlertRules)]
AlertsPart = Annotated[Alerts, app_part(Alerts)]
NodeKeysPart = Annotated[NodeKeys, app_part(NodeKeys)]
WorkloadProjectsPart = Annotated[WorkloadProjects, app_part(WorkloadProjects)]


def _whole_tenant(identity: CurrentIdentity) -> Identity:
    """GPU telemetry and alerts name the tenant and the workload, not its project: a key
    of one project (decision 139) reads none of them, so it sees no other project's."""
    if identity.project is not None:
        raise Forbidden(
            "GPU metrics and alerts are the whole tenant's; a key of one project reads none "
            "of them: use a key of no project"
        )
    return identity


TenantIdentity = Annotated[Identity, Depends(_whole_tenant)]


def _range(start: datetime | None, end: datetime | None) -> tuple[datetime, datetime]:
    end = (end or datetime.now(UTC)).astimezone(UTC)
    start = (start or end - timedelta(hours=1)).astimezone(UTC)
    return start, end


@router.get(
    "/gpus", tags=["gpus"], summary="GPU inventory: all (platform admin) or the tenant's in use"
)
async def list_gpus(identity: TenantIdentity, metrics: MetricsPart) -> list[GpuView]:
    return await metrics.gpus(identity)


@router.get("/gpus/{gpu_uuid}/metrics", tags=["gpus"], summary="One GPU's time series")
async def gpu_metrics(
    gpu_uuid: str,
    identity: TenantIdentity,
    metrics: MetricsPart,
    start: Start = None,
    end: End = None,
    resolution: Resolution = "1m",
) -> MetricSeries:
    return await metrics.gpu_metrics(identity, gpu_uuid, *_range(start, end), resolution)


@router.get(
    "/gpu-instances/{instance_id}/metrics", tags=["gpus"], summary="An instance's GPUs over time"
)
async def instance_metrics(
    instance_id: str,
    identity: TenantIdentity,
    metrics: MetricsPart,
    start: Start = None,
    end: End = None,
    resolution: Resolution = "1m",
    tenant_id: TenantParam = None,
) -> MetricSeries:
    return await metrics.workload_metrics(
        identity, Workload.instance(instance_id), *_range(start, end), resolution, tenant_id
    )


@router.get("/jobs/{job_id}/metrics", tags=["gpus"], summary="A batch job's GPUs over time")
async def job_metrics(
    job_id: str,
    identity: TenantIdentity,
    metrics: MetricsPart,
    start: Start = None,
    end: End = None,
    resolution: Resolution = "1m",
    tenant_id: TenantParam = None,
) -> MetricSeries:
    """Every run's GPUs, all of a multi-node run's pods together."""
    return await metrics.workload_metrics(
        identity, Workload.job(job_id), *_range(start, end), resolution, tenant_id
    )


@router.get(
    "/inference-services/{service_id}/metrics",
    tags=["gpus"],
    summary="An inference service's GPUs over time",
)
async def service_metrics(
    service_id: str,
    identity: TenantIdentity,
    metrics: MetricsPart,
    start: Start = None,
    end: End = None,
    resolution: Resolution = "1m",
    tenant_id: TenantParam = None,
) -> MetricSeries:
    """Every replica's GPUs together."""
    return await metrics.workload_metrics(
        identity, Workload.service(service_id), *_range(start, end), resolution, tenant_id
    )


@router.get("/metrics/tenant", tags=["gpus"], summary="The tenant's GPUs in use over time")
async def tenant_metrics(
    identity: TenantIdentity,
    metrics: MetricsPart,
    start: Start = None,
    end: End = None,
    resolution: Resolution = "1m",
    tenant_id: TenantParam = None,
) -> MetricSeries:
    return await metrics.tenant_metrics(identity, *_range(start, end), resolution, tenant_id)


@router.get(
    "/capacity", tags=["fleet"], summary="Free GPUs by zone and type, node by node (everyone)"
)
async def capacity(_: CurrentIdentity, fleet: FleetPart) -> list[Capacity]:
    return await fleet.capacity()


@router.get("/nodes", tags=["fleet"], summary="Nodes: health, tiers, use (platform admin)")
async def list_nodes(identity: TenantIdentity, fleet: FleetPart) -> list[NodeView]:
    return await fleet.nodes(identity)


@router.get("/nodes/{node}/metrics", tags=["fleet"], summary="A node's GPUs over time")
async def node_metrics(
    node: str,
    identity: TenantIdentity,
    metrics: MetricsPart,
    start: Start = None,
    end: End = None,
    resolution: Resolution = "1m",
) -> MetricSeries:
    return await metrics.node_metrics(identity, node, *_range(start, end), resolution)


@router.post(
    "/nodes/{node}/release",
    status_code=status.HTTP_202_ACCEPTED,
    tags=["fleet"],
    summary="Return a degraded or quarantined node to service (platform admin)",
)
async def release_node(node: str, identity: TenantIdentity, fleet: FleetPart) -> NodeView:
    return await fleet.release_node(identity, node)


@router.post(
    "/nodes/{node}/quarantine",
    status_code=status.HTTP_202_ACCEPTED,
    tags=["fleet"],
    summary="Take a node out of service until it is released (platform admin)",
)
async def quarantine_node(
    node: str, body: NodeQuarantine, identity: TenantIdentity, fleet: FleetPart
) -> NodeView:
    return await fleet.quarantine_node(identity, node, body.reason)


@router.post(
    "/node-keys",
    tags=["fleet"],
    summary="A node agent's key for its node's telemetry, for its pod-bound token",
    responses={401: {"description": "Not a token for this service"},
               403: {"description": "Not an agent's token, or not bound to a pod on a node"}},
)  # fmt: skip
async def issue_node_key(
    node_keys: NodeKeysPart, authorization: Annotated[str, Header()] = ""
) -> NodeKey:
    """Called by node agents directly, never through the gateway: the caller is
    whoever Kubernetes says the bearer token belongs to."""
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise Unauthenticated("send the agent's projected ServiceAccount token as a bearer token")
    return await node_keys.issue(token.strip())


@router.get("/fleet", tags=["fleet"], summary="Utilisation by zone and GPU type, tiers, health")
async def fleet(identity: TenantIdentity, fleet_part: FleetPart) -> FleetSummary:
    identity.require_role("platform-admin")
    return await fleet_part.fleet(identity)


@router.post(
    "/alert-rules",
    status_code=status.HTTP_201_CREATED,
    tags=["alerts"],
    summary="A rule: fleet-wide (platform admin) or on the tenant's instances (tenant admin)",
)
async def create_rule(
    body: AlertRuleCreate, identity: TenantIdentity, rules: AlertRulesPart
) -> AlertRule:
    return await rules.create(identity, body)


@router.get("/alert-rules", tags=["alerts"], summary="The caller's rules")
async def list_rules(identity: TenantIdentity, rules: AlertRulesPart) -> list[AlertRule]:
    return await rules.list(identity)


@router.get("/alert-rules/{rule_id}", tags=["alerts"], summary="One rule")
async def get_rule(rule_id: str, identity: TenantIdentity, rules: AlertRulesPart) -> AlertRule:
    return await rules.get(identity, rule_id)


@router.patch("/alert-rules/{rule_id}", tags=["alerts"], summary="Change a rule")
async def update_rule(
    rule_id: str, body: AlertRuleUpdate, identity: TenantIdentity, rules: AlertRulesPart
) -> AlertRule:
    return await rules.update(identity, rule_id, body)


@router.post(
    "/alert-rules/{rule_id}/webhook-secret",
    tags=["alerts"],
    summary="A new signing secret for the rule's webhook, shown once",
    responses={409: {"description": "The rule has no webhook"}},
)
async def rotate_webhook_secret(
    rule_id: str, identity: TenantIdentity, rules: AlertRulesPart
) -> AlertRule:
    return await rules.rotate_secret(identity, rule_id)


@router.delete(
    "/alert-rules/{rule_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    tags=["alerts"],
    summary="Delete a rule",
)
async def delete_rule(rule_id: str, identity: TenantIdentity, rules: AlertRulesPart) -> Response:
    await rules.delete(identity, rule_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/alerts", tags=["alerts"], summary="Alerts, newest first")
async def list_alerts(
    identity: TenantIdentity,
    alerts: AlertsPart,
    projects: WorkloadProjectsPart,
    state: Annotated[str | None, Query(pattern="^(firing|resolved)$")] = None,
    rule_id: Annotated[
        str | None, Query(alias="ruleID", max_length=64, description="Only this rule's alerts.")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> list[Alert]:
    seen = None
    if not identity.is_platform_admin:
        seen = await projects.seen_match(identity, identity.require_tenant())
    return await alerts.list(identity, state, limit, rule_id=rule_id, seen=seen)
