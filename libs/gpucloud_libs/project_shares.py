"""What the `default` project holds of a tenant's GPUs, and who is in a project
(decision 138): the gateway shows them and the instances service admits by them, so
both read them here."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .naming import DEFAULT_PROJECT

#: A tenant document's projects: id to share, each with its `members` (user ids).
Projects = Mapping[str, Mapping[str, Any]]


def default_share(tenant_max_gpus: int, shares: Iterable[int | None]) -> int:
    """The GPUs the other projects' shares leave of the tenant's (a project with no
    share carves nothing)."""
    return max(tenant_max_gpus - sum(share or 0 for share in shares), 0)


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
