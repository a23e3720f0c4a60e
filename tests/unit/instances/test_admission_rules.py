"""The admission rules every workload kind shares: what it copies from its spec, the
limits a tenant admin sets on each user, and the project it starts in."""

from __future__ import annotations

from typing import cast

import pytest

from gpucloud_instances.admission import (
    Claimant,
    Held,
    Placed,
    allowed_zones,
    claim_refusal,
    claimant,
    listed_projects,
    project_cap,
    project_of,
    spec_fields,
    spend_refusal,
    startable_projects,
)
from gpucloud_instances.documents import (
    QuotaDoc,
    SpecDoc,
    TenantDoc,
    WorkloadDocFields,
    in_project_view,
)
from gpucloud_instances.quota_ledger import _Book, _Change
from gpucloud_libs.errors import Forbidden, NotFound
from gpucloud_libs.identity import Identity, Role
from gpucloud_libs.project_shares import acting_project

from .fixtures import a_spec

SPEC = a_spec(
    name="h100x2",
    cpu="16",
    memory="128Gi",
    gpu_type="NVIDIA-H100",
    gpu_num=2,
    zones=["zone-a", "zone-b"],
)


def test_a_workload_copies_its_specs_shape_the_zones_it_may_run_in_and_its_cluster() -> None:
    fields = spec_fields(SPEC, allowed_zones(SPEC, "zone-b"), Placed("local-1", "region-1"))
    assert fields == {
        "spec_name": "h100x2", "gpu_type": "NVIDIA-H100", "gpu_count": 2,
        "gpu_resource": "nvidia.com/gpu", "gpu_weight": "1", "cpu": "16", "memory": "128Gi",
        "zones": ["zone-b"], "cluster": "local-1", "region": "region-1",
    }  # fmt: skip


def test_a_shared_gpu_spec_passes_on_its_kind_and_weight() -> None:
    shared: SpecDoc = {**SPEC, "gpu_resource": "nvidia.com/mig-1g.10gb", "gpu_weight": "1/7"}
    fields = spec_fields(shared, [], Placed("local-1", "region-1"))
    assert (fields["gpu_resource"], fields["gpu_weight"]) == ("nvidia.com/mig-1g.10gb", "1/7")
    assert fields["zones"] == []


def test_a_claim_past_its_users_own_limit_is_refused_and_another_users_fits() -> None:
    quota: QuotaDoc = {
        "max_gpus": 8, "max_instances": 10, "max_storage_bytes": 0,
        "monthly_spend_cap_cents": None, "max_cpu_cores": None, "max_memory_gib": None,
    }  # fmt: skip
    book = _Book({}, {}, {}, {})
    ada, bob = Claimant("u-ada", 2), Claimant("u-bob", None)
    assert _Change("i-1", 2, quota, who=ada).apply(book)
    assert not _Change("i-2", 1, quota, who=ada).apply(book)
    assert _Change("i-3", 4, quota, who=bob).apply(book)
    assert book.held(ada).user_gpus == 2
    assert book.held(bob).user_gpus == 4
    # A retried claim counts once; a release gives the user's GPUs back.
    assert _Change("i-1", 2, quota, who=ada).apply(book)
    assert _Change("i-1", 0, None).apply(book)
    assert _Change("i-2", 2, quota, who=ada).apply(book)
    # The 422 says which limit, on the ledger's own figures: the tenant's first.
    refusal = claim_refusal(quota, ada, Held(2, 6, user_gpus=2), wanted=1)
    assert refusal is not None
    assert refusal.extensions["limit"] == "user_max_gpus"
    assert "you hold 2 and asked for 1" in refusal.detail
    tenant_first = claim_refusal(quota, ada, Held(2, quota["max_gpus"], user_gpus=2), wanted=1)
    assert tenant_first is not None
    assert tenant_first.extensions["limit"] == "max_gpus"
    assert claim_refusal(quota, bob, Held(2, 6, user_gpus=4), wanted=1) is None


def test_a_user_whose_spend_reached_their_limit_starts_nothing_until_it_is_raised() -> None:
    tenant: TenantDoc = {
        **cast(TenantDoc, {"_id": "acme", "namespace": "gpc-acme"}), "user_limits": {"u-ada": {"max_gpus": None, "monthly_spend_cents": 500}},
        "spend_stops": {"u-ada": {"period": "2026-11", "limit_cents": 500}},
    }  # fmt: skip
    refused = spend_refusal(tenant, "u-ada", "2026-11")
    assert refused is not None
    assert "500 cents" in refused.detail
    assert spend_refusal(tenant, "u-bob", "2026-11") is None  # another user
    assert spend_refusal(tenant, "u-ada", "2026-12") is None  # a new month
    raised: TenantDoc = {
        **tenant,
        "user_limits": {"u-ada": {"max_gpus": None, "monthly_spend_cents": 900}},
    }
    assert spend_refusal(raised, "u-ada", "2026-11") is None


def test_a_claim_of_no_one_grown_by_a_limited_user_counts_in_full() -> None:
    """A claim recorded before users were (no owner) is not the user's: growing it to 8
    GPUs is 8 of theirs, past a limit of 4."""
    quota: QuotaDoc = {
        "max_gpus": 16, "max_instances": 10, "max_storage_bytes": 0,
        "monthly_spend_cap_cents": None, "max_cpu_cores": None, "max_memory_gib": None,
    }  # fmt: skip
    book = _Book({"s-1": 4}, {}, {}, {})
    grown = _Change("s-1", 8, quota, resize=True, generation=2, who=Claimant("u-ada", 4))
    assert not grown.apply(book)
    assert book.claims == {"s-1": 4}


def test_a_workload_starts_in_default_or_a_project_its_caller_is_a_member_of() -> None:
    tenant = cast(TenantDoc, {"_id": "acme", "projects": {"vision": {
        "name": "Vision", "max_gpus": 4, "borrow_gpus": 0, "monthly_budget_cents": None,
        "members": ["u-ada"],
    }}})  # fmt: skip

    def caller(subject: str, role: Role = "tenant-user") -> Identity:
        return Identity(subject=subject, role=role, tenant_id="acme", expires_at=0)

    assert project_of(tenant, caller("u-bob"), "default") == "default"
    assert project_of(tenant, caller("u-ada"), "vision") == "vision"
    assert project_of(tenant, caller("u-root", "tenant-admin"), "vision") == "vision"
    for subject, project in (("u-bob", "vision"), ("u-ada", "nlp")):
        # Not a member, or no such project: the same 404.
        with pytest.raises(NotFound, match=f"project '{project}' does not exist"):
            project_of(tenant, caller(subject), project)


def _tenant_with_projects(max_gpus: int, **shares: tuple[int | None, int]) -> TenantDoc:
    """A tenant with `max_gpus` of quota and projects of (share, borrow) GPUs."""
    quota = {"max_gpus": max_gpus, "max_instances": 10, "max_storage_bytes": 0,
             "monthly_spend_cap_cents": None, "max_cpu_cores": None, "max_memory_gib": None}  # fmt: skip
    projects: dict[str, dict[str, object]] = {
        name: {"name": name, "max_gpus": share, "borrow_gpus": borrow,
               "monthly_budget_cents": None, "members": []}
        for name, (share, borrow) in shares.items()
    }  # fmt: skip
    return cast(TenantDoc, {"_id": "acme", "quota": quota, "projects": projects})


def test_a_projects_share_is_carved_from_the_tenants_quota_and_default_holds_the_rest() -> None:
    tenant = _tenant_with_projects(16, vision=(6, 4), nlp=(4, 0), scratch=(None, 0))
    assert project_cap(tenant, "vision") == 6
    assert project_cap(tenant, "vision", may_borrow=True) == 10  # batch jobs borrow
    assert project_cap(tenant, "scratch") is None  # no share: the tenant's quota only
    assert project_cap(tenant, "default") == 6  # 16 less the 10 carved
    assert project_cap(tenant, "gone") is None  # removed while its work runs
    assert project_cap(_tenant_with_projects(16), "default") is None  # nothing carved


def test_a_claim_past_its_projects_share_is_refused_while_another_projects_fits() -> None:
    tenant = _tenant_with_projects(16, vision=(4, 0))
    quota = tenant["quota"]
    book = _Book({}, {}, {}, {})
    in_vision, in_default = (
        claimant(tenant, "u-ada", "vision"),
        claimant(tenant, "u-bob", "default"),
    )
    assert _Change("i-1", 4, quota, who=in_vision).apply(book)
    assert not _Change("i-2", 1, quota, who=claimant(tenant, "u-cy", "vision")).apply(book)
    assert _Change("i-3", 8, quota, who=in_default).apply(book)
    assert book.projects == {"i-1": "vision"}  # default's claims need no entry
    assert (book.held(in_vision).project_gpus, book.held(in_default).project_gpus) == (4, 8)
    refusal = claim_refusal(quota, in_vision, book.held(in_vision), wanted=1)
    assert refusal is not None
    assert refusal.extensions["limit"] == "project_max_gpus"
    assert refusal.detail == "project 'vision' may hold 4 GPUs; it holds 4 and asked for 1"
    # Its release gives the project its share back.
    assert _Change("i-1", 0, None).apply(book)
    assert book.projects == {}
    assert _Change("i-2", 4, quota, who=in_vision).apply(book)


def test_a_tenants_usage_sums_its_users_and_its_projects_claims() -> None:
    book = _Book(
        {"i-1": 2, "i-2": 3, "i-3": 4}, {}, {"i-1": "u-ada", "i-2": "u-ada"}, {"i-2": "vision"}
    )
    held = book.usage()
    assert (held.workloads, held.gpus) == (3, 9)
    assert held.users == {"u-ada": 5}  # i-3 names no user
    assert held.projects == {"default": 6, "vision": 3}


def test_a_caller_may_start_in_default_and_their_own_projects_an_admin_in_all() -> None:
    tenant = _tenant_with_projects(16, vision=(4, 0), nlp=(4, 0))
    tenant["projects"]["vision"]["members"] = ["u-ada"]

    def caller(subject: str, role: Role = "tenant-user") -> Identity:
        return Identity(subject=subject, role=role, tenant_id="acme", expires_at=0)

    assert startable_projects(tenant, caller("u-ada")) == ["default", "vision"]
    assert startable_projects(tenant, caller("u-bob")) == ["default"]
    assert startable_projects(tenant, caller("u-root", "tenant-admin")) == [
        "default", "nlp", "vision",
    ]  # fmt: skip


def test_a_key_of_one_project_acts_sees_and_starts_in_that_project_alone() -> None:
    tenant = _tenant_with_projects(16, vision=(4, 0), nlp=(4, 0))
    tenant["projects"]["vision"]["members"] = ["u-ada"]
    key = Identity(subject="u-ada", role="tenant-user", tenant_id="acme", expires_at=0,
                   project="vision", projects=("vision",))  # fmt: skip
    plain = key.model_copy(update={"project": None, "projects": ("default", "vision")})
    assert acting_project(key, None) == "vision"  # named nowhere: the key's own
    assert acting_project(plain, None) == "default"
    assert project_of(tenant, key, "vision") == "vision"
    with pytest.raises(Forbidden, match="this credential is for project 'vision'"):
        project_of(tenant, key, "default")
    assert listed_projects(key, None) == ("vision",)
    assert listed_projects(plain, None) == ("default", "vision")  # hers alone
    assert listed_projects(plain, "vision") == ("vision",)  # a filter, as asked
    assert startable_projects(tenant, key) == ["vision"]
    in_vision: dict[str, str] = {"project": "vision"}
    in_default: dict[str, str] = {}
    assert in_project_view(cast(WorkloadDocFields, in_vision), key)
    assert not in_project_view(cast(WorkloadDocFields, in_default), key)
    assert in_project_view(cast(WorkloadDocFields, in_default), plain)
    # Out of the project (or with it gone), the key starts nothing there.
    tenant["projects"]["vision"]["members"] = []
    with pytest.raises(NotFound, match="project 'vision' is not one of yours; you are in vision"):
        project_of(tenant, key, None)
    assert startable_projects(tenant, key) == []


def test_a_member_lists_and_reads_the_work_of_her_projects_alone() -> None:
    """Decision 142: a user of no project key sees `default`'s and her projects' work;
    another project's is refused in her terms, as one that is not hers."""
    tenant = _tenant_with_projects(16, vision=(4, 0), nlp=(4, 0))
    tenant["projects"]["vision"]["members"] = ["u-ada"]
    bob = Identity(subject="u-bob", role="tenant-user", tenant_id="acme", expires_at=0,
                   projects=("default",))  # fmt: skip
    admin = Identity(subject="u-root", role="tenant-admin", tenant_id="acme", expires_at=0)
    in_vision = cast(WorkloadDocFields, {"project": "vision"})
    assert not in_project_view(in_vision, bob)
    assert in_project_view(in_vision, admin)
    assert listed_projects(bob, None) == ("default",)
    assert listed_projects(admin, None) is None  # the tenant's whole
    with pytest.raises(NotFound, match="project 'vision' is not one of yours; you are in default"):
        listed_projects(bob, "vision")
    with pytest.raises(NotFound, match="project 'vision' is not one of yours"):
        project_of(tenant, bob, "vision")
    with pytest.raises(NotFound, match="project 'ghost' does not exist"):
        project_of(tenant, admin, "ghost")
