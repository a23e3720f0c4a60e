"""HTTP routes of inference services."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response, status

from gpucloud_libs.http import CurrentIdentity, app_part

from ..schemas import ProjectFilter
from .schemas import (
    InferenceService,
    InferenceServiceCreate,
    InferenceServicePage,
    InferenceServicePatch,
    ReplicaRunPage,
    RollbackRequest,
    ServiceEndpoints,
    ServiceLoadReport,
)
from .service import InferenceServices

router = APIRouter()

ServicesPart = Annotated[InferenceServices, app_part(InferenceServices)]


@router.post(
    "/inference-services",
    status_code=status.HTTP_201_CREATED,
    tags=["inference-services"],
    summary="Create an inference service: replicas behind one URL, rolled out by revision",
)
async def create_service(
    body: InferenceServiceCreate,
    identity: CurrentIdentity,
    services: ServicesPart,
    response: Response,
) -> InferenceService:
    service = await services.create(identity, body)
    response.headers["Location"] = f"/inference-services/{service.service_id}"
    return service


@router.get(
    "/inference-services",
    tags=["inference-services"],
    summary="List inference services (a platform admin sees every tenant's)",
)
async def list_services(
    identity: CurrentIdentity,
    services: ServicesPart,
    tenant_id: Annotated[
        str | None, Query(alias="tenantID", description="Platform admins only")
    ] = None,
    project: ProjectFilter = None,
    cursor: Annotated[str | None, Query(max_length=512)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> InferenceServicePage:
    return await services.page(
        identity, cursor=cursor, limit=limit, tenant_id=tenant_id, project=project
    )


@router.get(
    "/inference-services/{service_id}/replicas",
    tags=["inference-services"],
    summary="Each replica a service of this name has run, from its binding to a node to its "
    "end, its deleted earlier uses' too: what its usage is billed from",
)
async def service_replicas(
    service_id: str,
    identity: CurrentIdentity,
    services: ServicesPart,
    tenant_id: Annotated[
        str | None, Query(alias="tenantID", description="Platform admins: the service's tenant")
    ] = None,
) -> ReplicaRunPage:
    return await services.replica_runs(identity, service_id, tenant_id=tenant_id)


@router.get(
    "/inference-services/{service_id}",
    tags=["inference-services"],
    summary="One inference service: its replicas, their revisions and its revision history",
)
async def get_service(
    service_id: str, identity: CurrentIdentity, services: ServicesPart
) -> InferenceService:
    return await services.get(identity, service_id)


@router.patch(
    "/inference-services/{service_id}",
    tags=["inference-services"],
    summary="Change a service; a new image, env, command or volumes roll out a new revision",
    responses={409: {"description": "Changed meanwhile, or being deleted"}},
)
async def change_service(
    service_id: str,
    body: InferenceServicePatch,
    identity: CurrentIdentity,
    services: ServicesPart,
) -> InferenceService:
    return await services.change(identity, service_id, body)


@router.post(
    "/inference-services/{service_id}/rollback",
    tags=["inference-services"],
    summary="Roll back: an earlier revision's template, rolled out as the next revision",
    responses={409: {"description": "Changed meanwhile, or being deleted"}},
)
async def rollback_service(
    service_id: str,
    body: RollbackRequest,
    identity: CurrentIdentity,
    services: ServicesPart,
) -> InferenceService:
    return await services.rollback(identity, service_id, body)


@router.delete(
    "/inference-services/{service_id}",
    status_code=status.HTTP_202_ACCEPTED,
    tags=["inference-services"],
    summary="Delete a service: each replica drains, then the service and its quota go",
)
async def delete_service(
    service_id: str, identity: CurrentIdentity, services: ServicesPart
) -> InferenceService:
    return await services.delete(identity, service_id)


@router.get(
    "/inference-services/{service_id}/endpoints",
    tags=["inference-services"],
    summary="Where a service's serving replicas are reached (for the gateway)",
)
async def service_endpoints(
    service_id: str, identity: CurrentIdentity, services: ServicesPart
) -> ServiceEndpoints:
    return await services.endpoints(identity, service_id)


@router.post(
    "/inference-services/load",
    status_code=status.HTTP_204_NO_CONTENT,
    tags=["inference-services"],
    summary="Requests in flight per service, as one gateway replica sees them (the gateway's)",
)
async def report_service_load(
    body: ServiceLoadReport, identity: CurrentIdentity, services: ServicesPart
) -> Response:
    await services.record_load(identity, body)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
