"""What the `default` project holds of a tenant's GPUs, who is in a project, and which
project a call acts in (decisions 138 and 139): the gateway, the instances and the
storage service each hold them, so all read them here."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .errors import Conflict, Forbidden
from .identity import Identity
from .naming import DEFAULT_PROJECT

#: A tenant document's projects: id to share, each with its `members` (user ids).
Projects = Mapping[str, Mapping[str, Any]]


def carved_gpus(shares: Iterable[int | None]) -> int:
    """The GPUs the projects' shares carve of the tenant's (a project with no share
    carves nothing)."""
    return sum(share or 0 for share in shares)


def default_share(tenant_max_gpus: int, shares: Iterable[int | None]) -> int:
    """The GPUs the other projects' shares leave of the tenant's."""
    return max(tenant_max_gpus - carved_gpus(shares), 0)


def is_member(projects: Projects | None, project_id: str, user_id: str | None) -> bool:
    """Whether the user is a member of the project (everyone is of `default`)."""
    project = (projects or {}).get(project_id)
    return project_id == DEFAULT_PROJECT or (
        project is not None and user_id in (project.get("members") or [])
    )


def may_act_in(
    projects: Projects | None, project_id: str, *, user_id: str | None, role: str
) -> bool:
    """Whether the user may act in the project: a member, or a tenant admin (who is an
    admin of every project there is)."""
    admin = role == "tenant-admin" and project_id in (projects or {})
    return admin or is_member(projects, project_id, user_id)


def acting_project(identity: Identity, asked: str | None) -> str:
    """The project a call acts in: the one it names, else `default`; a key of one
    project (decision 139) acts in that one alone, and names no other (a 403)."""
    if identity.project is None:
        return asked or DEFAULT_PROJECT
    if asked not in (None, identity.project):
        raise Forbidden(f"this credential is for project {identity.project!r}; it acts in no other")
    return identity.project


def storage_refusal(storage_id: str, owner: str, project: str) -> Conflict | None:
    """Why work of `project` may not take a storage of project `owner`: a project's work
    takes its own project's storages and `default`'s (decision 140); None when it may."""
    if owner in (project, DEFAULT_PROJECT):
        return None
    return Conflict(
        f"storage {storage_id!r} belongs to project {owner!r}; work of project {project!r} "
        "takes its own project's storages and default's",
        project=project,
    )


def volume_refusal(storage_id: str, project: str) -> Conflict:
    """A volume of another project asked for by work of `project`: its claim lives in
    its own project's namespace, and a pod mounts no claim of another (decision 140)."""
    return Conflict(
        f"volume storage {storage_id!r} is mounted by the work of its own project alone, "
        f"not of project {project!r}",
        project=project,
    )
