"""The pure rules every workload kind is admitted by: quota, a known spec, allowed zones,
and what it copies from its spec."""

from __future__ import annotations

from typing import NamedTuple

from gpucloud_libs.errors import QuotaExceeded, ValidationFailed
from gpucloud_libs.naming import GPU_RESOURCE

from .documents import QuotaDoc, SpecDoc, WorkloadSpecFields


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
