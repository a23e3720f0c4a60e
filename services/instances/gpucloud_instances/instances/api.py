"""HTTP routes of GPU instances, and of the caller's quota."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Path, Query, Response, status
from fastapi.responses import StreamingResponse

from gpucloud_libs.http import CurrentIdentity, app_part

from ..lifecycle import State
from ..schemas import ProjectFilter, QuotaUse
from .access import InstanceAccess
from .schemas import Instance, InstanceCreate, InstanceEndpoint, InstancePage
from .service import Instances

router = APIRouter()

InstancesPart = Annotated[Instances, app_part(Instances)]
AccessPart = Annotated[InstanceAccess, app_part(InstanceAccess)]


@router.get(
    "/quota",
    tags=["instances"],
    summary="Your tenant's GPU quota and what its workloads hold of it now",
)
async def own_quota(identity: CurrentIdentity, instances: InstancesPart) -> QuotaUse:
    return await instances.quota(identity)


@router.post(
    "/gpu-instances",
    status_code=status.HTTP_202_ACCEPTED,
    tags=["instances"],
    summary="Start a GPU instance",
    responses={200: {"description": "A retry of a request that already created this instance"}},
)
async def create_instance(
    body: InstanceCreate,
    identity: CurrentIdentity,
    instances: InstancesPart,
    response: Response,
    idempotency_key: Annotated[str | None, Header(max_length=128)] = None,
) -> Instance:
    instance, created = await instances.create(identity, body, idempotency_key)
    if not created:
        response.status_code = status.HTTP_200_OK
    response.headers["Location"] = f"/gpu-instances/{instance.instance_id}"
    return instance


@router.get(
    "/gpu-instances",
    tags=["instances"],
    summary="List instances (a platform admin sees every tenant's)",
)
async def list_instances(
    identity: CurrentIdentity,
    instances: InstancesPart,
    state: Annotated[
        list[State] | None, Query(description="Only these states; default: all but deleted")
    ] = None,
    spec_name: Annotated[str | None, Query(alias="specName")] = None,
    tenant_id: Annotated[
        str | None, Query(alias="tenantID", description="Platform admins only")
    ] = None,
    project: ProjectFilter = None,
    cursor: Annotated[str | None, Query(max_length=512)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> InstancePage:
    return await instances.list(
        identity, states=[s.value for s in state] if state else None, spec_name=spec_name,
        cursor=cursor, limit=limit, tenant_id=tenant_id, project=project,
    )  # fmt: skip


@router.get(
    "/gpu-instances/{instance_id}",
    tags=["instances"],
    summary="One instance, with its state history; with afterRevision, a long poll for its next transition",
)
async def get_instance(
    instance_id: str,
    identity: CurrentIdentity,
    instances: InstancesPart,
    after_revision: Annotated[
        int | None,
        Query(
            alias="afterRevision",
            ge=0,
            description="Answer once the instance's revision is past this one",
        ),
    ] = None,
    wait_seconds: Annotated[
        float,
        Query(
            alias="waitSeconds",
            ge=0,
            le=30,
            description="With afterRevision: how long to wait at most",
        ),
    ] = 10.0,
) -> Instance:
    return await instances.get(
        identity, instance_id, after_revision=after_revision, wait_s=wait_seconds
    )


@router.get(
    "/gpu-instances/{instance_id}/endpoints/{port}",
    tags=["instances"],
    summary="Where one port of a running instance is reached (for the gateway)",
    responses={409: {"description": "The instance is not running (yet)"}},
)
async def get_endpoint(
    instance_id: str,
    port: Annotated[int, Path(ge=1, le=65535)],
    identity: CurrentIdentity,
    access: AccessPart,
    tunnel: Annotated[
        bool,
        Query(description="For a TCP tunnel: any declared TCP port, public or not"),
    ] = False,
) -> InstanceEndpoint:
    return await access.endpoint(identity, instance_id, port, tunnel=tunnel)


@router.delete(
    "/gpu-instances/{instance_id}",
    status_code=status.HTTP_202_ACCEPTED,
    tags=["instances"],
    summary="Stop an instance; on a stopped or failed one, delete its record",
)
async def stop_instance(
    instance_id: str, identity: CurrentIdentity, instances: InstancesPart
) -> Instance:
    return await instances.stop(identity, instance_id)


@router.post(
    "/gpu-instances/{instance_id}/stop",
    status_code=status.HTTP_202_ACCEPTED,
    tags=["instances"],
    summary="Stop an instance; idempotent: one already stopping, stopped or failed is left as it is",
)
async def request_stop(
    instance_id: str, identity: CurrentIdentity, instances: InstancesPart
) -> Instance:
    return await instances.stop(identity, instance_id, keep_record=True)


@router.post(
    "/gpu-instances/{instance_id}/start",
    status_code=status.HTTP_202_ACCEPTED,
    tags=["instances"],
    summary="Start a stopped or failed instance again, with its record, spec and storages; "
    "idempotent: one already starting or running is left as it is",
)
async def request_start(
    instance_id: str, identity: CurrentIdentity, instances: InstancesPart
) -> Instance:
    return await instances.start(identity, instance_id)


@router.get(
    "/gpu-instances/{instance_id}/logs",
    tags=["instances"],
    summary="The instance's log; with follow, as it grows",
    response_class=StreamingResponse,
    responses={
        200: {"content": {"text/plain": {}}},
        409: {"description": "The instance is not running"},
        429: {"description": "The tenant already follows the most logs at once"},
    },
)
async def instance_logs(
    instance_id: str,
    identity: CurrentIdentity,
    access: AccessPart,
    follow: Annotated[bool, Query(description="Keep the stream open as the log grows")] = False,
    tail_lines: Annotated[
        int | None, Query(alias="tailLines", ge=1, le=100_000, description="Only the last lines")
    ] = None,
) -> StreamingResponse:
    chunks = await access.logs(identity, instance_id, follow=follow, tail_lines=tail_lines)
    return StreamingResponse(chunks, media_type="text/plain; charset=utf-8")
