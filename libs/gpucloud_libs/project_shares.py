"""What the `default` project holds of a tenant's GPUs, who is in a project, and which
project a call acts in (decisions 138 and 139): the gateway, the instances and the
storage service each hold them, so all read them here."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .errors import Conflict, Forbidden, NotFound
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


def visible_projects(
    projects: Projects | None, *, user_id: str | None, role: str, key_project: str | None
) -> tuple[str, ...] | None:
    """The projects whose work a credential sees and acts on (decision 142): a key of one
    project, that one; a tenant admin, every one (None); a tenant user, `default` and the
    projects they are a member of. The gateway signs it into every identity, so services
    that keep no membership (metering, monitoring) apply the same rule."""
    if key_project is not None:
        return (key_project,)
    if role != "tenant-user":
        return None
    mine = (p for p in sorted(projects or {}) if is_member(projects, p, user_id))
    return (DEFAULT_PROJECT, *mine)


def unseen_work(kind: str, name: str, seen: tuple[str, ...] | None) -> NotFound:
    """The 404 for work the caller does not see (`seen`: the projects it sees, None for
    all), worded as the caller would put it: it may exist, in a project that is not
    theirs (decision 142)."""
    if seen is None:
        return NotFound(f"{kind} {name!r} does not exist")
    return NotFound(f"{kind} {name!r} does not exist in your projects ({', '.join(seen)})")


def unknown_project(project_id: str, seen: tuple[str, ...] | None) -> NotFound:
    """The 404 for a project the caller may not act in (`seen`: the projects it sees,
    None for all): to a user, one that is not theirs, with the ones that are (what
    does not show is not said to exist); to an admin, one that does not exist."""
    if seen is None:
        return NotFound(f"project {project_id!r} does not exist")
    return NotFound(
        f"project {project_id!r} is not one of yours; you are in {', '.join(seen)} "
        "(a tenant admin adds members)"
    )


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
