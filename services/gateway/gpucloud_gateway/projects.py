"""Projects of a tenant (decision 138): a tenant admin makes them, sets each one's
share of the tenant's GPUs and its budget, and says who is a member. They live on
the tenant's document and travel with it on `tenant.upserted`; `default` is not
stored: it holds every user and what the others do not carve."""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from typing import Any

from gpucloud_libs.errors import Conflict, Forbidden, NotFound, ValidationFailed
from gpucloud_libs.naming import DEFAULT_PROJECT
from gpucloud_libs.project_shares import carved_gpus, default_share, may_act_in, unknown_project

from .documents import TenantDoc
from .project_schemas import Project, ProjectCreate, ProjectMember, ProjectUpdate
from .schemas import Principal
from .store import UserStore
from .tenants import Tenants, effective_quota
from .users import Users

MAX_PROJECTS = 50
#: Ids no project takes: `default` is every tenant's, and usage reports name the
#: tenant's storage row `storage`.
RESERVED = frozenset({DEFAULT_PROJECT, "storage"})
MAX_MEMBERS = 200


class Projects:
    def __init__(self, tenants: Tenants, users: Users, user_store: UserStore) -> None:
        self._tenants = tenants
        self._users = users
        self._user_store = user_store

    async def create(self, principal: Principal, body: ProjectCreate) -> Project:
        tenant_id = (await self._admin_tenant(principal))["_id"]
        project_id = body.project_id
        if project_id == DEFAULT_PROJECT:
            raise Conflict(f"project {project_id!r} exists", project_id=project_id)
        if project_id in RESERVED:
            raise ValidationFailed(f"{project_id!r} is reserved; name the project otherwise",
                                   field="projectID")  # fmt: skip

        def made(tenant: TenantDoc) -> dict[str, Any]:
            projects = tenant.get("projects") or {}
            if project_id in projects:
                raise Conflict(f"project {project_id!r} exists", project_id=project_id)
            if len(projects) >= MAX_PROJECTS:
                raise ValidationFailed(f"a tenant has at most {MAX_PROJECTS} projects")
            share: dict[str, Any] = {
                "name": body.name, "max_gpus": body.max_gpus, "borrow_gpus": body.borrow_gpus,
                "monthly_budget_cents": body.monthly_budget_cents, "members": [],
            }  # fmt: skip
            _check_carve(tenant, project_id, share)
            return share

        doc = await self._tenants.edit_entry(tenant_id, "projects", project_id, made)
        return await self._view(doc, project_id)

    async def list(self, principal: Principal) -> list[Project]:
        """Every project to an admin; to a user, `default` and those they are in; to a
        key of one project, that one."""
        tenant = await self._tenant(principal)
        ids = [DEFAULT_PROJECT, *sorted(tenant.get("projects") or {})]
        return [
            await self._view(tenant, project_id)
            for project_id in ids
            if _reaches(tenant, project_id, principal)
        ]

    async def get(self, principal: Principal, project_id: str) -> Project:
        tenant = await self._tenant(principal)
        self._share(tenant, project_id, principal)
        return await self._view(tenant, project_id)

    async def update(self, principal: Principal, project_id: str, body: ProjectUpdate) -> Project:
        tenant_id = (await self._admin_tenant(principal))["_id"]
        changes = body.model_dump(exclude_unset=True)
        if changes.get("name") is None:
            changes.pop("name", None)  # a name is never unset

        def updated(tenant: TenantDoc) -> dict[str, Any]:
            share = {**_stored(tenant, project_id), **changes}
            if share.get("borrow_gpus") is None:
                share["borrow_gpus"] = 0
            _check_carve(tenant, project_id, share)
            return share

        doc = await self._tenants.edit_entry(tenant_id, "projects", project_id, updated)
        return await self._view(doc, project_id)

    async def delete(self, principal: Principal, project_id: str) -> None:
        tenant = await self._admin_tenant(principal)

        def removed(current: TenantDoc) -> None:
            _stored(current, project_id)  # a 404 for one that is not

        await self._tenants.edit_entry(tenant["_id"], "projects", project_id, removed)

    async def add_member(self, principal: Principal, project_id: str, user_id: str) -> Project:
        tenant = await self._admin_tenant(principal)
        _stored(tenant, project_id)
        await self._users.get(principal, user_id)  # a 404 outside the admin's tenant

        def joined(current: TenantDoc) -> dict[str, Any]:
            share = _stored(current, project_id)
            members: list[str] = [*(share.get("members") or [])]
            if user_id in members:
                return share
            if len(members) >= MAX_MEMBERS:
                raise ValidationFailed(f"a project has at most {MAX_MEMBERS} members")
            return {**share, "members": [*members, user_id]}

        doc = await self._tenants.edit_entry(tenant["_id"], "projects", project_id, joined)
        return await self._view(doc, project_id)

    async def remove_member(self, principal: Principal, project_id: str, user_id: str) -> None:
        tenant = await self._admin_tenant(principal)

        def left(current: TenantDoc) -> dict[str, Any]:
            share = _stored(current, project_id)
            members: list[str] = [*(share.get("members") or [])]
            if user_id not in members:
                raise NotFound(f"{user_id!r} is not a member of project {project_id!r}")
            return {**share, "members": [member for member in members if member != user_id]}

        await self._tenants.edit_entry(tenant["_id"], "projects", project_id, left)

    async def check_named(self, tenant_id: str, project_ids: Sequence[str]) -> Sequence[str]:
        """`project_ids`, each a project of the tenant (a 422 naming the first that is
        not), without `default`, which holds everyone."""
        projects = (await self._tenants.existing(tenant_id)).get("projects") or {}
        for project_id in project_ids:
            if project_id != DEFAULT_PROJECT and project_id not in projects:
                raise ValidationFailed(f"project {project_id!r} does not exist", field="projects")
        return sorted({p for p in project_ids if p != DEFAULT_PROJECT})

    async def set_membership(
        self, tenant_id: str, user_id: str, *, join: AbstractSet[str],
        leave: AbstractSet[str] = frozenset(),
    ) -> None:  # fmt: skip
        """The user joins the projects of `join` and leaves those of `leave` (an
        invitation's projects; a provider's groups at each sign-in); a project no longer
        there, or full, is passed over."""
        tenant = await self._tenants.existing(tenant_id)
        for project_id in sorted(set(tenant.get("projects") or {}) & (join | leave)):

            def moved(current: TenantDoc, project_id: str = project_id) -> dict[str, Any] | None:
                share = (current.get("projects") or {}).get(project_id)
                if share is None:
                    return None  # removed meanwhile
                members = [*(share.get("members") or [])]
                if project_id in join and user_id not in members and len(members) < MAX_MEMBERS:
                    members.append(user_id)
                elif project_id in leave - join and user_id in members:
                    members.remove(user_id)
                return {**share, "members": members}

            await self._tenants.edit_entry(tenant_id, "projects", project_id, moved)

    async def forget_user(self, tenant_id: str, user_id: str) -> None:
        """A removed user leaves every project."""
        tenant = await self._tenants.existing(tenant_id)
        await self.set_membership(
            tenant_id, user_id, join=frozenset(), leave=set(tenant.get("projects") or {})
        )

    async def _tenant(self, principal: Principal) -> TenantDoc:
        if principal.tenant_id is None:
            raise Forbidden("projects are a tenant's; this credential has no tenant")
        return await self._tenants.existing(principal.tenant_id)

    async def _admin_tenant(self, principal: Principal) -> TenantDoc:
        if not _is_admin(principal):
            raise Forbidden("only a tenant admin changes projects")
        return await self._tenant(principal)

    def _share(self, tenant: TenantDoc, project_id: str, principal: Principal) -> None:
        """A 404 for a project the caller does not reach (`_reaches`)."""
        if not _reaches(tenant, project_id, principal):
            raise unknown_project(project_id, principal.projects)

    async def _view(self, tenant: TenantDoc, project_id: str) -> Project:
        projects = tenant.get("projects") or {}
        if project_id == DEFAULT_PROJECT:
            quota = effective_quota(tenant["limits"], tenant.get("self_quota") or {})
            return Project(
                project_id=DEFAULT_PROJECT, name="Default", max_gpus=default_share(quota["max_gpus"], (p.get("max_gpus") for p in projects.values())),
                borrow_gpus=0, monthly_budget_cents=None, everyone=True, members=[],
            )  # fmt: skip
        share = projects[project_id]
        users = await self._user_store.many(share.get("members") or [])
        return Project(
            project_id=project_id, name=share["name"], max_gpus=share.get("max_gpus"),
            borrow_gpus=share.get("borrow_gpus") or 0,
            monthly_budget_cents=share.get("monthly_budget_cents"), everyone=False,
            members=[ProjectMember(user_id=u["_id"], email=u["email"], name=u["name"])
                     for u in users],
        )  # fmt: skip


def _stored(tenant: TenantDoc, project_id: str) -> dict[str, Any]:
    """A project a tenant admin may change: any but `default`."""
    if project_id == DEFAULT_PROJECT:
        raise Conflict("the default project holds what the others do not; it is not changed")
    share = (tenant.get("projects") or {}).get(project_id)
    if share is None:
        raise NotFound(f"project {project_id!r} does not exist")
    return share


def _check_carve(tenant: TenantDoc, project_id: str, share: dict[str, Any]) -> None:
    """The projects' shares together fit the tenant's GPUs, and so does what one may
    borrow: a 422 naming the figures otherwise."""
    quota = effective_quota(tenant["limits"], tenant.get("self_quota") or {})
    others = {k: v for k, v in (tenant.get("projects") or {}).items() if k != project_id}
    carved = carved_gpus([*(p.get("max_gpus") for p in others.values()), share.get("max_gpus")])
    if carved > quota["max_gpus"]:
        raise ValidationFailed(
            f"the projects' GPU shares would come to {carved}, above the tenant's "
            f"{quota['max_gpus']}",
            field="maxGpus",
        )
    if (share.get("max_gpus") or 0) + share.get("borrow_gpus", 0) > quota["max_gpus"]:
        raise ValidationFailed(
            f"a project may borrow up to the tenant's {quota['max_gpus']} GPUs, its share included",
            field="borrowGpus",
        )


def _is_admin(principal: Principal) -> bool:
    return principal.role == "tenant-admin"


def _reaches(tenant: TenantDoc, project_id: str, principal: Principal) -> bool:
    """Whether the caller sees the project: one they may act in (a member, or a tenant
    admin), and, for a key of one project, that one."""
    return principal.project in (None, project_id) and may_act_in(
        tenant.get("projects"), project_id, user_id=principal.user_id, role=principal.role
    )
