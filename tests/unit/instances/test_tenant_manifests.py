"""What a tenant's namespace is made to reflect (tenancy/tenants.py `tenant_fields`,
tenancy/reconciler.py `tenant_manifests`, `layout_digest`): the namespace quota its
GPU quota implies, borrowing included; the objects applied, in order; and when every
namespace must be applied again."""

from __future__ import annotations

from typing import Any, cast

from gpucloud_instances import manifests
from gpucloud_instances.documents import TenantDoc, namespace_project
from gpucloud_instances.settings import DENIED_BY_DEFAULT, InstancesSettings
from gpucloud_instances.tenancy.reconciler import layout_digest, tenant_manifests
from gpucloud_instances.tenancy.tenants import tenant_fields
from gpucloud_libs.events import ProjectShare, TenantQuota, TenantUpserted

SETTINGS = InstancesSettings(
    default_cpu_cores_per_gpu=16, default_memory_gib_per_gpu=128, tenant_storage_subject=None,
    gateway_namespace="gpucloud-system", dns_namespace="kube-system",
)  # fmt: skip


def upserted(tenant_id: str = "acme", **quota: Any) -> TenantUpserted:
    limits = {"max_gpus": 4, "max_instances": 2, "max_storage_bytes": 0, **quota}
    return TenantUpserted(
        tenant_id=tenant_id, name="Acme", status="active", quota=TenantQuota(**limits)
    )


def stored(event: TenantUpserted, settings: InstancesSettings = SETTINGS) -> TenantDoc:
    return cast(TenantDoc, {"_id": event.tenant_id, **tenant_fields(event, settings)})


def by_kind(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {obj["kind"]: obj for obj in objects}


def test_a_tenants_namespace_holds_what_it_may_borrow_too() -> None:
    event = upserted(max_gpus=4, borrow_gpus=2)
    fields = tenant_fields(event, SETTINGS)
    assert (fields["namespace_cpu"], fields["namespace_memory"]) == ("96", "768Gi")
    assert fields["quota"]["borrow_gpus"] == 2
    quota = by_kind(tenant_manifests("acme", stored(event), SETTINGS))["ResourceQuota"]
    hard = quota["spec"]["hard"]
    assert (hard["requests.nvidia.com/gpu"], hard["pods"]) == ("6", str(2 + 6 * 64))


def test_a_tenant_without_gpus_still_gets_a_namespace_that_can_hold_something() -> None:
    fields = tenant_fields(upserted(max_gpus=0, max_instances=0), SETTINGS)
    assert (fields["namespace_cpu"], fields["namespace_memory"]) == ("1", "1Gi")


def test_a_quota_that_names_cpu_and_memory_is_taken_as_it_is() -> None:
    fields = tenant_fields(upserted(max_cpu_cores=6, max_memory_gib=48), SETTINGS)
    assert (fields["namespace_cpu"], fields["namespace_memory"]) == ("6", "48Gi")


def test_a_tenants_namespace_and_queue_weight_come_with_its_fields() -> None:
    event = upserted().model_copy(update={"queue_weight": 2.5})
    fields = tenant_fields(event, SETTINGS)
    assert (fields["namespace"], fields["queue_weight"]) == ("gpc-acme", 2.5)
    assert fields["status"] == "active"
    odd = tenant_fields(upserted("Acme_Corp"), SETTINGS)["namespace"]
    assert odd.startswith("gpc-acme-corp-")
    assert odd != "gpc-acme-corp"  # two ids that read the same never share a namespace


def test_the_version_changes_with_the_quota_and_nothing_else() -> None:
    first = tenant_fields(upserted(), SETTINGS)
    renamed = tenant_fields(upserted().model_copy(update={"name": "Acme Inc"}), SETTINGS)
    more = tenant_fields(upserted(max_gpus=5), SETTINGS)
    assert renamed["version"] == first["version"]
    assert more["version"] != first["version"]
    assert len(first["version"]) == 16


def test_the_namespace_objects_are_applied_namespace_first() -> None:
    objects = tenant_manifests("acme", stored(upserted()), SETTINGS)
    assert [obj["kind"] for obj in objects] == [
        "Namespace", "ResourceQuota", "LimitRange", "NetworkPolicy",
    ]  # fmt: skip
    assert objects[0]["metadata"]["labels"][manifests.TENANT] == "acme"
    assert {obj["metadata"].get("namespace", "gpc-acme") for obj in objects} == {"gpc-acme"}


def test_the_storage_service_is_bound_in_the_namespace_only_when_it_is_named() -> None:
    settings = SETTINGS.model_copy(
        update={"tenant_storage_subject": "ServiceAccount:gpucloud:storage",
                "tenant_storage_role": "gpucloud-tenant-storage"}
    )  # fmt: skip
    binding = by_kind(tenant_manifests("acme", stored(upserted()), settings))["RoleBinding"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "storage", "namespace": "gpucloud"}
    ]
    assert binding["roleRef"]["name"] == "gpucloud-tenant-storage"
    assert "RoleBinding" not in by_kind(tenant_manifests("acme", stored(upserted()), SETTINGS))


def test_the_network_policy_denies_the_built_in_ranges_and_the_operators_own() -> None:
    settings = SETTINGS.model_copy(update={"tenant_egress_extra_denied_cidrs": ["203.0.113.0/24"]})
    policy = by_kind(tenant_manifests("acme", stored(upserted()), settings))["NetworkPolicy"]
    public = policy["spec"]["egress"][2]["to"]
    v4, v6 = (block["ipBlock"]["except"] for block in public)
    assert "203.0.113.0/24" in v4
    assert {"169.254.0.0/16", "100.64.0.0/10", "10.0.0.0/8"} <= set(v4)
    # NAT64 and 6to4 reach the private IPv4 ranges through a translator.
    assert {"64:ff9b::/96", "2002::/16", "fe80::/10"} <= set(v6)
    assert sorted(v4 + v6) == sorted([*DENIED_BY_DEFAULT, "203.0.113.0/24"])


def test_every_namespace_is_applied_again_when_what_it_depends_on_changes() -> None:
    same = layout_digest(SETTINGS)
    assert layout_digest(SETTINGS.model_copy()) == same
    for change in (
        {"gateway_namespace": "edge"}, {"dns_namespace": "dns"},
        {"tenant_storage_subject": "User:storage"},
        {"tenant_egress_extra_denied_cidrs": ["203.0.113.0/24"]},
    ):  # fmt: skip
        assert layout_digest(SETTINGS.model_copy(update=change)) != same, change
    assert layout_digest(SETTINGS.model_copy(update={"instance_domain": "x.example"})) == same


def with_projects(**shares: ProjectShare) -> TenantUpserted:
    return upserted(max_gpus=8, borrow_gpus=2).model_copy(update={"projects": shares})


def test_each_project_has_a_namespace_holding_its_share_and_the_tenants_policies() -> None:
    event = with_projects(
        vision=ProjectShare(name="Vision", max_gpus=2, borrow_gpus=1),
        speech=ProjectShare(name="Speech"),
    )
    objects = tenant_manifests("acme", stored(event), SETTINGS)
    namespaces = {
        obj["metadata"]["name"]: obj["metadata"]["labels"]
        for obj in objects
        if obj["kind"] == "Namespace"
    }
    assert list(namespaces) == ["gpc-acme", "gpc-acme--speech", "gpc-acme--vision"]
    assert manifests.PROJECT not in namespaces["gpc-acme"]  # the tenant's own is no project's
    assert namespaces["gpc-acme--vision"][manifests.PROJECT] == "vision"
    assert {labels[manifests.TENANT] for labels in namespaces.values()} == {"acme"}
    gpus = {
        obj["metadata"]["namespace"]: obj["spec"]["hard"]["requests.nvidia.com/gpu"]
        for obj in objects
        if obj["kind"] == "ResourceQuota"
    }
    # Its share and what it may borrow; a project with no share, the tenant's ceiling.
    assert gpus == {"gpc-acme": "10", "gpc-acme--vision": "3", "gpc-acme--speech": "10"}
    policies = [obj["metadata"]["namespace"] for obj in objects if obj["kind"] == "NetworkPolicy"]
    assert sorted(policies) == sorted(namespaces)


def test_a_project_made_or_resized_is_a_new_version_and_a_member_is_not() -> None:
    alone = tenant_fields(upserted(max_gpus=8, borrow_gpus=2), SETTINGS)["version"]
    vision = tenant_fields(with_projects(vision=ProjectShare(name="V", max_gpus=2)), SETTINGS)
    joined = with_projects(vision=ProjectShare(name="V", max_gpus=2, members=["u-ada"]))
    resized = with_projects(vision=ProjectShare(name="V", max_gpus=3))
    assert vision["version"] != alone
    assert tenant_fields(joined, SETTINGS)["version"] == vision["version"]
    assert tenant_fields(resized, SETTINGS)["version"] != vision["version"]


def test_work_admitted_in_a_project_before_its_namespace_keeps_the_tenants() -> None:
    """Its pods run in the namespace it was admitted with, and its storages' Secrets
    must go there: the tenant's, for work of a project admitted before slice 3."""
    now = cast(Any, {"tenant_id": "acme", "project": "vision", "namespace": "gpc-acme--vision"})
    before = cast(Any, {"tenant_id": "acme", "project": "vision", "namespace": "gpc-acme"})
    plain = cast(Any, {"tenant_id": "acme", "namespace": "gpc-acme"})
    assert [namespace_project(doc) for doc in (now, before, plain)] == [
        "vision", "default", "default",
    ]  # fmt: skip
