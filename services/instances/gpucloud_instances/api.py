"""HTTP routes of the instances service. Callers come through the gateway, which
signs their identity; every route scopes its reads and writes by that identity."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Path, Query, Response, status
from fastapi.responses import StreamingResponse

from gpucloud_libs.http import CurrentIdentity, app_part

from .inference import InferenceServices
from .instances import Instances
from .job_lifecycle import JobState
from .jobs import Jobs
from .lifecycle import State
from .schemas import (
    InferenceService,
    InferenceServiceCreate,
    InferenceServicePage,
    InferenceServicePatch,
    Instance,
    InstanceCreate,
    InstanceEndpoint,
    InstancePage,
    Job,
    JobCreate,
    JobPage,
    QuotaUse,
    ReplicaRunPage,
    RollbackRequest,
    ServiceEndpoints,
    ServiceLoadReport,
)

router = APIRouter()


InstancesPart = Annotated[Instances, app_part(Instances)]


JobsPart = Annotated[Jobs, app_part(Jobs)]


ServicesPart = Annotated[InferenceServices, app_part(InferenceServices)]


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
    cursor: Annotated[str | None, Query(max_length=512)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> InstancePage:
    return await instances.list(
        identity, states=[s.value for s in state] if state else None, spec_name=spec_name,
        cursor=cursor, limit=limit, tenant_id=tenant_id,
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
    instances: InstancesPart,
    tunnel: Annotated[
        bool,
        Query(description="For a TCP tunnel: any declared TCP port, public or not"),
    ] = False,
) -> InstanceEndpoint:
    return await instances.endpoint(identity, instance_id, port, tunnel=tunnel)


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


@router.post(
    "/jobs",
    status_code=status.HTTP_202_ACCEPTED,
    tags=["jobs"],
    summary="Submit a batch job: it queues until the tenant's quota has room, then runs to completion",
    responses={200: {"description": "A retry of a request that already submitted this job"}},
)
async def submit_job(
    body: JobCreate,
    identity: CurrentIdentity,
    jobs: JobsPart,
    response: Response,
    idempotency_key: Annotated[str | None, Header(max_length=128)] = None,
) -> Job:
    job, created = await jobs.submit(identity, body, idempotency_key)
    if not created:
        response.status_code = status.HTTP_200_OK
    response.headers["Location"] = f"/jobs/{job.job_id}"
    return job


@router.get("/jobs", tags=["jobs"], summary="List jobs (a platform admin sees every tenant's)")
async def list_jobs(
    identity: CurrentIdentity,
    jobs: JobsPart,
    state: Annotated[list[JobState] | None, Query(description="Only these states")] = None,
    tenant_id: Annotated[
        str | None, Query(alias="tenantID", description="Platform admins only")
    ] = None,
    cursor: Annotated[str | None, Query(max_length=512)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> JobPage:
    return await jobs.list(
        identity, states=[s.value for s in state] if state else None, cursor=cursor,
        limit=limit, tenant_id=tenant_id,
    )  # fmt: skip


@router.get(
    "/jobs/{job_id}",
    tags=["jobs"],
    summary="One job, with its runs, its history and, while queued, its place in the queue",
)
async def get_job(job_id: str, identity: CurrentIdentity, jobs: JobsPart) -> Job:
    return await jobs.get(identity, job_id)


@router.get(
    "/jobs/{job_id}/logs",
    tags=["jobs"],
    summary="A run's log (the latest run's unless `run` names one); with follow, as it grows",
    response_class=StreamingResponse,
    responses={
        200: {"content": {"text/plain": {}}},
        409: {"description": "No pod of the job has run yet"},
    },
)
async def job_logs(
    job_id: str,
    identity: CurrentIdentity,
    jobs: JobsPart,
    run: Annotated[str | None, Query(max_length=64, description="A run's runID")] = None,
    follow: Annotated[bool, Query(description="Keep the stream open as the log grows")] = False,
    tail_lines: Annotated[
        int | None, Query(alias="tailLines", ge=1, le=100_000, description="Only the last lines")
    ] = None,
) -> StreamingResponse:
    chunks = await jobs.logs(identity, job_id, run_id=run, follow=follow, tail_lines=tail_lines)
    return StreamingResponse(chunks, media_type="text/plain; charset=utf-8")


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
    instances: InstancesPart,
    follow: Annotated[bool, Query(description="Keep the stream open as the log grows")] = False,
    tail_lines: Annotated[
        int | None, Query(alias="tailLines", ge=1, le=100_000, description="Only the last lines")
    ] = None,
) -> StreamingResponse:
    chunks = await instances.logs(identity, instance_id, follow=follow, tail_lines=tail_lines)
    return StreamingResponse(chunks, media_type="text/plain; charset=utf-8")


@router.delete(
    "/jobs/{job_id}",
    status_code=status.HTTP_202_ACCEPTED,
    tags=["jobs"],
    summary="Cancel a job; one that already ended is returned as it is",
)
async def cancel_job(job_id: str, identity: CurrentIdentity, jobs: JobsPart) -> Job:
    return await jobs.cancel(identity, job_id)


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
    cursor: Annotated[str | None, Query(max_length=512)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> InferenceServicePage:
    return await services.page(identity, cursor=cursor, limit=limit, tenant_id=tenant_id)


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
