"""The pure rules every workload kind is admitted by: quota, a known spec, allowed zones,
and what it copies from its spec."""

from __future__ import annotations

from datetime import UTC
from typing import NamedTuple

from gpucloud_libs.clock import now
from gpucloud_libs.errors import NotFound, QuotaExceeded, ValidationFailed
from gpucloud_libs.gpu_shares import GpuShare
from gpucloud_libs.identity import Identity
from gpucloud_libs.naming import GPU_RESOURCE

from .documents import QuotaDoc, SpecDoc, TenantDoc, UserLimitsDoc, WorkloadSpecFields


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


def own_limit_refusal(user: UserCap | None, held: int, *, wanted: int) -> QuotaExceeded | None:
    """Why a user's workload of `wanted` GPUs does not fit the GPUs they may hold at
    once, holding `held`; None when it fits or they have no such limit."""
    if user is None or user.max_gpus is None or held + wanted <= user.max_gpus:
        return None
    return QuotaExceeded(
        f"your own limit is {user.max_gpus} GPUs at once; you hold {held} and asked for "
        f"{wanted}",
        limit="user_max_gpus", limit_value=user.max_gpus, in_use=held, requested=wanted,
    )  # fmt: skip


def claim_refusal(
    quota: QuotaDoc, user: UserCap | None, *, instances: int, gpus: int, user_gpus: int,
    wanted: int,
) -> QuotaExceeded | None:  # fmt: skip
    """Why a claim of `wanted` GPUs of quota does not fit: the tenant's quota (holding
    `instances` workloads and `gpus`), then its user's own limit (holding
    `user_gpus`); None when it fits. The quota ledger decides by it under its lock,
    and a refused start is answered with it, on the same figures."""
    return quota_refusal(quota, instances, gpus, wanted=wanted) or own_limit_refusal(
        user, user_gpus, wanted=wanted
    )


def never_fits(
    tenant: TenantDoc, user_id: str | None, share: GpuShare, gpus: int
) -> QuotaExceeded | None:
    """Why a queued workload of `gpus` (of `share`'s kind) could never be admitted, past
    the tenant's quota or its user's own GPU limit even holding nothing else; None when
    it could."""
    return claim_refusal(
        tenant["quota"], user_cap(tenant, user_id), instances=0, gpus=0, user_gpus=0,
        wanted=share.quota_gpus(gpus),
    )  # fmt: skip


class UserCap(NamedTuple):
    """The user a quota claim is made for, and the GPUs they may hold at once (None:
    only the tenant's quota holds them)."""

    user_id: str
    max_gpus: int | None


def user_cap(tenant: TenantDoc, user_id: str | None) -> UserCap | None:
    """Whose claim it is, with their GPU limit; None for work no user started."""
    if user_id is None:
        return None
    limits = user_limits(tenant, user_id)
    return UserCap(user_id, None if limits is None else limits.get("max_gpus"))


def user_limits(tenant: TenantDoc, user_id: str | None) -> UserLimitsDoc | None:
    """The limits the tenant admin set on the user, if any."""
    if user_id is None:
        return None
    return (tenant.get("user_limits") or {}).get(user_id)


#: The project of every workload that names none, and of every user (decision 138).
DEFAULT_PROJECT = "default"


def project_of(tenant: TenantDoc, identity: Identity, project_id: str) -> str:
    """The project a workload is started in: `default`, or one the caller is a member
    of (a tenant admin is of every one); a 404 otherwise, as for a project that is
    not, so a user learns nothing of projects they are not in."""
    if project_id == DEFAULT_PROJECT:
        return project_id
    project = (tenant.get("projects") or {}).get(project_id)
    if project is None or (
        identity.role != "tenant-admin" and identity.subject not in project["members"]
    ):
        raise NotFound(f"project {project_id!r} does not exist")
    return project_id


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
    if stop is None or stop["period"] != period or limit is None or limit > stop["limit_cents"]:
        return None
    return QuotaExceeded(
        f"your spend this month reached your limit of {limit} cents; ask a tenant admin "
        "to raise it, or wait for next month",
        limit="user_monthly_spend_cents", limit_value=limit,
    )  # fmt: skip


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
