"""HTTP routes of batch jobs."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, Response, status
from fastapi.responses import StreamingResponse

from gpucloud_libs.http import CurrentIdentity, app_part

from ..job_lifecycle import JobState
from ..schemas import ProjectFilter
from .schemas import Job, JobCreate, JobPage
from .service import Jobs

router = APIRouter()

JobsPart = Annotated[Jobs, app_part(Jobs)]


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
    project: ProjectFilter = None,
    cursor: Annotated[str | None, Query(max_length=512)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> JobPage:
    return await jobs.list(
        identity, states=[s.value for s in state] if state else None, cursor=cursor,
        limit=limit, tenant_id=tenant_id, project=project,
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


@router.delete(
    "/jobs/{job_id}",
    status_code=status.HTTP_202_ACCEPTED,
    tags=["jobs"],
    summary="Cancel a job; one that already ended is returned as it is",
)
async def cancel_job(job_id: str, identity: CurrentIdentity, jobs: JobsPart) -> Job:
    return await jobs.cancel(identity, job_id)
