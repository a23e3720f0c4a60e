"""The API's shapes of projects (decision 138)."""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from typing import Annotated, Protocol

from pydantic import Field

from gpucloud_libs.http import ApiModel
from gpucloud_libs.naming import PROJECT_ID_PATTERN

#: A DNS label (a project's namespace is named after it), at most 20 characters.
ProjectId = Annotated[str, Field(pattern=PROJECT_ID_PATTERN)]
ProjectName = Annotated[str, Field(min_length=1, max_length=128)]
Gpus = Annotated[int, Field(ge=0, le=1_000_000)]
Cents = Annotated[int, Field(ge=0, le=10**12)]


class ProjectCreate(ApiModel):
    project_id: ProjectId = Field(alias="projectID")
    name: ProjectName
    #: Its share of the tenant's GPUs; unset, only the tenant's quota holds it.
    max_gpus: Gpus | None = None
    #: GPUs beyond its share its jobs may borrow of the tenant's idle ones.
    borrow_gpus: Gpus = 0
    monthly_budget_cents: Cents | None = None


class ProjectUpdate(ApiModel):
    """What to change; a field sent as null is unset (no share, no budget)."""

    name: ProjectName | None = None
    max_gpus: Gpus | None = None
    borrow_gpus: Gpus | None = None
    monthly_budget_cents: Cents | None = None


class ProjectMember(ApiModel):
    user_id: str = Field(alias="userID")
    email: str
    name: str


class Project(ApiModel):
    project_id: str = Field(alias="projectID")
    name: str
    max_gpus: int | None
    borrow_gpus: int
    monthly_budget_cents: int | None
    #: `default` has every user of the tenant; the others, their members.
    everyone: bool
    members: list[ProjectMember]


class ProjectMemberships(Protocol):
    """Who joins which projects, for the parts below projects in the gateway's layers
    that make members (an accepted invitation, a provider's groups): `Projects`."""

    async def check_named(self, tenant_id: str, project_ids: Sequence[str]) -> Sequence[str]:
        """The ids, each a project of the tenant (a 422 otherwise), without `default`."""
        ...

    async def set_membership(
        self, tenant_id: str, user_id: str, *, join: AbstractSet[str],
        leave: AbstractSet[str] = frozenset(),
    ) -> None:  # fmt: skip
        """The user joins the projects of `join` and leaves those of `leave`."""
        ...
