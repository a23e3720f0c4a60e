"""The pure rules every workload kind is admitted by: quota, a known spec, allowed zones,
and what it copies from its spec."""

from __future__ import annotations

from datetime import UTC
from typing import NamedTuple

from gpucloud_libs.clock import now
from gpucloud_libs.errors import QuotaExceeded, ValidationFailed
from gpucloud_libs.gpu_shares import GpuShare
from gpucloud_libs.identity import Identity
from gpucloud_libs.naming import DEFAULT_PROJECT, GPU_RESOURCE
from gpucloud_libs.project_shares import (
    acting_project,
    default_share,
    may_act_in,
    unknown_project,
)

from .documents import (
    QuotaDoc,
    SpecDoc,
    SpendStopDoc,
    TenantDoc,
    UserLimitsDoc,
    WorkloadDocFields,
    WorkloadSpecFields,
    workload_project,
)


def quota_refusal(quota: QuotaDoc, count: int, gpus: int, *, wanted: int) -> QuotaExceeded | None:
    """Why one more instance with `wanted` GPUs does not fit, given `count` instances
    and `gpus` held; None when it fits. The one rule every quota check applies."""
    if count + 1 > quota["max_instances"]:
        return QuotaExceeded(
            f"the tenant may run {quota['max_instances']} instances and has {count}",
            limit="max_instances",
            limit_value=quota["max_instances"],
            in_use=count,
            requested=1,
        )
    if gpus + wanted > quota["max_gpus"]:
        return QuotaExceeded(
            f"the tenant may hold {quota['max_gpus']} GPUs, holds {gpus} and asked for {wanted}",
            limit="max_gpus",
            limit_value=quota["max_gpus"],
            in_use=gpus,
            requested=wanted,
        )
    return None


def own_limit_refusal(who: Claimant | None, held: int, *, wanted: int) -> QuotaExceeded | None:
    """Why a user's workload of `wanted` GPUs does not fit the GPUs they may hold at
    once, holding `held`; None when it fits or they have no such limit."""
    if who is None or who.max_gpus is None or held + wanted <= who.max_gpus:
        return None
    return QuotaExceeded(
        f"your own limit is {who.max_gpus} GPUs at once; you hold {held} and asked for "
        f"{wanted}",
        limit="user_max_gpus", limit_value=who.max_gpus, in_use=held, requested=wanted,
    )  # fmt: skip


def project_refusal(who: Claimant | None, held: int, *, wanted: int) -> QuotaExceeded | None:
    """Why a workload of `wanted` GPUs does not fit its project's share of the tenant's
    quota, the project holding `held`; None when it fits or the project has no share."""
    if who is None or who.project_max_gpus is None or held + wanted <= who.project_max_gpus:
        return None
    return QuotaExceeded(
        f"project {who.project!r} may hold {who.project_max_gpus} GPUs; it holds {held} "
        f"and asked for {wanted}",
        limit="project_max_gpus", limit_value=who.project_max_gpus, in_use=held,
        requested=wanted,
    )  # fmt: skip


class Held(NamedTuple):
    """What a claim's tenant holds besides it: workloads and GPUs, and the GPUs of the
    claim's user and of its project."""

    instances: int
    gpus: int
    user_gpus: int = 0
    project_gpus: int = 0


def claim_refusal(
    quota: QuotaDoc, who: Claimant | None, held: Held, *, wanted: int
) -> QuotaExceeded | None:
    """Why a claim of `wanted` GPUs of quota does not fit: the tenant's quota, then its
    user's own limit, then its project's share; None when it fits. The quota ledger
    decides by it under its lock, and a refused start is answered with it, on the same
    figures."""
    return (
        quota_refusal(quota, held.instances, held.gpus, wanted=wanted)
        or own_limit_refusal(who, held.user_gpus, wanted=wanted)
        or project_refusal(who, held.project_gpus, wanted=wanted)
    )


def never_fits(
    tenant: TenantDoc, user_id: str | None, project: str, share: GpuShare, gpus: int
) -> QuotaExceeded | None:
    """Why a queued workload of `gpus` (of `share`'s kind) could never be admitted, past
    the tenant's quota, its user's own GPU limit or its project's share even holding
    nothing else; None when it could."""
    who = claimant(tenant, user_id, project)
    return claim_refusal(tenant["quota"], who, Held(0, 0), wanted=share.quota_gpus(gpus))


class Claimant(NamedTuple):
    """Whose quota claim it is, with the caps inside the tenant's quota that hold it:
    the GPUs its user may hold at once and its project's share (None: no such cap)."""

    user_id: str | None
    max_gpus: int | None
    project: str = DEFAULT_PROJECT
    project_max_gpus: int | None = None


def claimant(
    tenant: TenantDoc, user_id: str | None, project: str, *, may_borrow: bool = False
) -> Claimant:
    """The claimant of a workload the user started in the project; `may_borrow`: a
    batch job, which may go past its project's share by what the project may borrow."""
    limits = user_limits(tenant, user_id)
    return Claimant(
        user_id, None if limits is None else limits.get("max_gpus"), project,
        project_cap(tenant, project, may_borrow=may_borrow),
    )  # fmt: skip


def workload_claimant(
    tenant: TenantDoc, doc: WorkloadDocFields, *, may_borrow: bool = False
) -> Claimant:
    """The claimant of a stored workload: who started it, in which project."""
    return claimant(tenant, doc["user_id"], workload_project(doc), may_borrow=may_borrow)


def project_cap(tenant: TenantDoc, project: str, *, may_borrow: bool = False) -> int | None:
    """The GPUs the project's work may hold at once: its share of the tenant's quota
    (and what it may borrow, for `may_borrow` work). `default` holds what the other
    projects' shares leave; None when nothing is carved (only the tenant's quota holds
    it)."""
    projects = tenant.get("projects") or {}
    if project != DEFAULT_PROJECT:
        found = projects.get(project)
        if found is None or found["max_gpus"] is None:
            return None
        return found["max_gpus"] + (found["borrow_gpus"] if may_borrow else 0)
    shares = [p["max_gpus"] for p in projects.values()]
    if all(share is None for share in shares):
        return None
    return default_share(tenant["quota"]["max_gpus"], shares)


def user_limits(tenant: TenantDoc, user_id: str | None) -> UserLimitsDoc | None:
    """The limits the tenant admin set on the user, if any."""
    if user_id is None:
        return None
    return (tenant.get("user_limits") or {}).get(user_id)


def project_member(tenant: TenantDoc, identity: Identity, project_id: str) -> str:
    """`default`, or a project the caller is a member of (a tenant admin is of every
    one); a 404 otherwise, as for a project that is not, so a user learns nothing of
    projects they are not in."""
    projects = tenant.get("projects")
    if not may_act_in(projects, project_id, user_id=identity.subject, role=identity.role):
        raise unknown_project(project_id, identity.projects)
    return project_id


def listed_projects(identity: Identity, asked: str | None) -> tuple[str, ...] | None:
    """The projects whose work a listing shows (None: the tenant's whole): the one asked
    for, if the caller sees it (a 404 otherwise), else every one it sees (decision
    142); a key of one project's alone."""
    if asked is None:
        return identity.projects
    acting_project(identity, asked)  # a key of one project names no other (a 403)
    if not identity.sees_project(asked):
        raise unknown_project(asked, identity.projects)
    return (asked,)


def project_of(tenant: TenantDoc, identity: Identity, asked: str | None) -> str:
    """The project a workload is started in (`acting_project`): one the caller is a
    member of (`project_member`). A project whose spend this month reached its budget
    starts nothing (a 422)."""
    project_id = project_member(tenant, identity, acting_project(identity, asked))
    refusal = project_spend_refusal(tenant, project_id, current_period())
    if refusal is not None:
        raise refusal
    return project_id


def startable_projects(tenant: TenantDoc, identity: Identity) -> list[str]:
    """The projects the caller may start work in: `default` and theirs (every one, to
    a tenant admin; its own alone, to a key of one project)."""
    projects = tenant.get("projects") or {}
    ids = [identity.project] if identity.project else [DEFAULT_PROJECT, *sorted(projects)]
    return [
        project for project in ids
        if may_act_in(projects, project, user_id=identity.subject, role=identity.role)
    ]  # fmt: skip


def project_spend_refusal(tenant: TenantDoc, project: str, period: str) -> QuotaExceeded | None:
    """Why the project may start nothing this month: its spend reached its monthly
    budget (metering said so), and the budget was not raised since; None otherwise."""
    stop = (tenant.get("project_stops") or {}).get(project)
    found = (tenant.get("projects") or {}).get(project)
    budget = None if found is None else found["monthly_budget_cents"]
    if not _still_stopped(stop, budget, period):
        return None
    return QuotaExceeded(
        f"project {project!r} spent its budget of {budget} cents this month; ask a tenant "
        "admin to raise it, or wait for next month",
        limit="project_monthly_budget_cents", limit_value=budget,
    )  # fmt: skip


def user_may_start(tenant: TenantDoc, user_id: str | None) -> TenantDoc:
    """The tenant, once it is sure the user may start work in it: a user whose spend
    this month reached their own limit is refused."""
    refusal = spend_refusal(tenant, user_id, current_period())
    if refusal is not None:
        raise refusal
    return tenant


def current_period() -> str:
    """The calendar month spend limits count in (UTC, as metering's)."""
    return now().astimezone(UTC).strftime("%Y-%m")


def spend_refusal(tenant: TenantDoc, user_id: str | None, period: str) -> QuotaExceeded | None:
    """Why the user may start nothing this month: their spend reached their own monthly
    limit (metering said so), and the limit was not raised since; None otherwise."""
    stop = (tenant.get("spend_stops") or {}).get(user_id or "")
    limits = user_limits(tenant, user_id)
    limit = None if limits is None else limits.get("monthly_spend_cents")
    if not _still_stopped(stop, limit, period):
        return None
    return QuotaExceeded(
        f"your spend this month reached your limit of {limit} cents; ask a tenant admin "
        "to raise it, or wait for next month",
        limit="user_monthly_spend_cents", limit_value=limit,
    )  # fmt: skip


def _still_stopped(stop: SpendStopDoc | None, limit: int | None, period: str) -> bool:
    """Metering said the spender (a user, a project) reached `limit` this period, and
    the limit was not raised since (a raised one lets them start again)."""
    return (
        stop is not None
        and stop["period"] == period
        and limit is not None
        and limit <= stop["limit_cents"]
    )


def known_spec(name: str, spec: SpecDoc | None) -> SpecDoc:
    """The spec a request names; a 422 on its field when there is none."""
    if spec is None:
        raise ValidationFailed(
            f"unknown spec {name!r}",
            errors=[{"loc": ["body", "specName"], "msg": "unknown spec", "type": "unknown_spec"}],
        )
    return spec


def allowed_zones(spec: SpecDoc, asked: str | None) -> list[str]:
    """The zones the instance may land in: the spec's, narrowed to the one asked for."""
    zones = list(spec["zones"])
    if asked is None:
        return zones
    if zones and asked not in zones:
        raise ValidationFailed(f"spec {spec['name']!r} is offered in {zones}, not {asked!r}")
    return [asked]


class Placed(NamedTuple):
    """Where a new workload goes (clusters/placement.py): the cluster, and its region."""

    cluster: str
    region: str


def spec_fields(spec: SpecDoc, zones: list[str], placed: Placed) -> WorkloadSpecFields:
    """What a workload of any kind copies from its spec at admission, with the zones it
    may run in (`allowed_zones`) and the cluster (and region) it was placed in."""
    return WorkloadSpecFields(
        spec_name=spec["name"], gpu_type=spec["gpu_type"], gpu_count=spec["gpu_num"],
        gpu_resource=spec.get("gpu_resource", GPU_RESOURCE),
        gpu_weight=spec.get("gpu_weight", "1"), cpu=spec["cpu"], memory=spec["memory"],
        zones=zones, cluster=placed.cluster, region=placed.region,
    )  # fmt: skip
