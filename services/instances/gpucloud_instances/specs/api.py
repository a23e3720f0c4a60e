"""HTTP routes of specs: created and deleted by platform admins, read by all."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Response, status

from gpucloud_libs.http import CurrentIdentity, app_part

from .schemas import Spec, SpecCreate
from .service import Specs

router = APIRouter()

SpecsPart = Annotated[Specs, app_part(Specs)]


@router.post(
    "/specs",
    status_code=status.HTTP_201_CREATED,
    tags=["specs"],
    summary="Define an instance spec (platform admin)",
)
async def create_spec(body: SpecCreate, identity: CurrentIdentity, specs: SpecsPart) -> Spec:
    identity.require_role("platform-admin")
    return await specs.create(body)


@router.get("/specs", tags=["specs"], summary="List instance specs")
async def list_specs(identity: CurrentIdentity, specs: SpecsPart) -> list[Spec]:
    return await specs.list()


@router.get("/specs/{name}", tags=["specs"], summary="One instance spec")
async def get_spec(name: str, identity: CurrentIdentity, specs: SpecsPart) -> Spec:
    return await specs.get(name)


@router.delete(
    "/specs/{name}",
    status_code=status.HTTP_204_NO_CONTENT,
    tags=["specs"],
    summary="Delete a spec (platform admin)",
)
async def delete_spec(name: str, identity: CurrentIdentity, specs: SpecsPart) -> Response:
    identity.require_role("platform-admin")
    await specs.delete(name)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
