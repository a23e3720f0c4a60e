"""The gateway's routes of projects (decision 138): a tenant admin makes and changes
them and their members; every member of the tenant sees `default` and the projects
they are in."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response, status

from gpucloud_libs.http import app_part

from .access import require
from .project_schemas import Project, ProjectCreate, ProjectUpdate
from .projects import Projects
from .routes import TENANT_ADMIN, TENANT_MEMBERS
from .schemas import Principal

router = APIRouter(prefix="/v1", tags=["projects"])

ProjectsPart = Annotated[Projects, app_part(Projects)]
ProjectPath = Annotated[str, Path(max_length=32)]
UserPath = Annotated[str, Path(max_length=64)]
Admin = Annotated[Principal, require(TENANT_ADMIN, "admin:write")]
Member = Annotated[Principal, require(TENANT_MEMBERS, "instances:read")]


@router.post(
    "/projects", status_code=status.HTTP_201_CREATED,
    summary="Make a project with its share of the tenant's GPUs and its budget (tenant admin)",
)  # fmt: skip
async def create_project(body: ProjectCreate, projects: ProjectsPart, principal: Admin) -> Project:
    return await projects.create(principal, body)


@router.get("/projects", summary="The tenant's projects: all to an admin, a user's own to them")
async def list_projects(projects: ProjectsPart, principal: Member) -> list[Project]:
    return await projects.list(principal)


@router.get("/projects/{project_id}", summary="A project, with its members")
async def get_project(
    project_id: ProjectPath, projects: ProjectsPart, principal: Member
) -> Project:
    return await projects.get(principal, project_id)


@router.patch(
    "/projects/{project_id}",
    summary="Change a project's name, GPU share, borrowing or budget (tenant admin)",
)
async def update_project(
    project_id: ProjectPath, body: ProjectUpdate, projects: ProjectsPart, principal: Admin
) -> Project:
    return await projects.update(principal, project_id, body)


@router.delete(
    "/projects/{project_id}", status_code=status.HTTP_204_NO_CONTENT,
    summary="Remove a project (tenant admin)",
)  # fmt: skip
async def delete_project(
    project_id: ProjectPath, projects: ProjectsPart, principal: Admin
) -> Response:
    await projects.delete(principal, project_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.put(
    "/projects/{project_id}/members/{user_id}",
    summary="Make a user of the tenant a member of the project (tenant admin)",
)
async def add_project_member(
    project_id: ProjectPath, user_id: UserPath, projects: ProjectsPart, principal: Admin
) -> Project:
    return await projects.add_member(principal, project_id, user_id)


@router.delete(
    "/projects/{project_id}/members/{user_id}", status_code=status.HTTP_204_NO_CONTENT,
    summary="Take a user out of the project (tenant admin)",
)  # fmt: skip
async def remove_project_member(
    project_id: ProjectPath, user_id: UserPath, projects: ProjectsPart, principal: Admin
) -> Response:
    await projects.remove_member(principal, project_id, user_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
