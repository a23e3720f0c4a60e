"""Who sees a project's storages (decision 140): its members and the tenant admins, a
key of one project its own project's and `default`'s; a deleted project's fall to
`default`."""

from __future__ import annotations

from typing import cast

from gpucloud_libs.identity import Identity, Role
from gpucloud_libs.project_shares import visible_projects
from gpucloud_storage.documents import StorageDoc, TenantDoc
from gpucloud_storage.ownership import may_see, storage_project, visible_match

TENANT = cast(TenantDoc, {
    "_id": "acme", "status": "active", "max_storage_bytes": 0,
    "projects": {"vision": {"members": ["u-ada"]}, "nlp": {"members": []}},
})  # fmt: skip


def caller(subject: str, role: Role = "tenant-user", project: str | None = None) -> Identity:
    """The caller as the gateway signs it: with the projects whose work it sees."""
    seen = visible_projects(TENANT["projects"], user_id=subject, role=role, key_project=project)
    return Identity(
        subject=subject, role=role, tenant_id="acme", expires_at=0, project=project, projects=seen
    )


def test_a_projects_storages_are_its_members_and_the_admins() -> None:
    ada, bob, root = caller("u-ada"), caller("u-bob"), caller("u-root", "tenant-admin")
    assert may_see(ada, "vision")
    assert not may_see(bob, "vision")
    assert may_see(root, "nlp")
    assert all(may_see(who, "default") for who in (ada, bob, root))
    assert visible_match(bob, TENANT) == {"project": {"$nin": ["vision", "nlp"]}}
    assert visible_match(ada, TENANT) == {"project": {"$nin": ["nlp"]}}
    assert visible_match(root, TENANT) == {}


def test_a_key_of_one_project_sees_its_projects_storages_and_defaults() -> None:
    key = caller("u-ada", project="vision")
    assert may_see(key, "vision")
    assert may_see(key, "default")  # everyone's, and its work takes them
    assert not may_see(caller("u-root", "tenant-admin", project="vision"), "nlp")
    assert visible_match(key, TENANT) == {"project": {"$nin": ["nlp"]}}
    of_default = caller("u-ada", project="default")
    assert visible_match(of_default, TENANT) == {"project": {"$nin": ["vision", "nlp"]}}


def test_a_deleted_projects_storage_falls_to_default() -> None:
    made = cast(StorageDoc, {"project": "gone"})
    assert storage_project(made, TENANT) == "default"
    assert storage_project(cast(StorageDoc, {"project": "vision"}), TENANT) == "vision"
    assert storage_project(cast(StorageDoc, {}), TENANT) == "default"  # from before projects
