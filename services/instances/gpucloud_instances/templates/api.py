"""HTTP routes of the template catalog."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter

from gpucloud_libs.http import CurrentIdentity, app_part

from .catalog import Templates
from .schemas import CatalogTemplate

router = APIRouter()

TemplatesPart = Annotated[Templates, app_part(Templates)]


@router.get(
    "/templates",
    tags=["templates"],
    summary="The app catalog: templates that instances and inference services start from",
)
async def list_templates(
    identity: CurrentIdentity, templates: TemplatesPart
) -> list[CatalogTemplate]:
    return templates.list()


@router.get("/templates/{template_id}", tags=["templates"], summary="One template of the catalog")
async def get_template(
    template_id: str, identity: CurrentIdentity, templates: TemplatesPart
) -> CatalogTemplate:
    return templates.get(template_id)
