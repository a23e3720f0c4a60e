"""Batch jobs as tenants ask for them: submission, reads and cancellation.

This side records what was asked, `queued`; the controller (jobs/reconciler.py)
admits it when the tenant's quota has room, runs it as a Kubernetes Job and
records each transition of the job and its runs. After the insert the
controller's worker is the job document's only writer, so a cancel is an
inserted request, as an instance's stop is.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator

from gpucloud_libs.clock import aware, aware_or_none, now
from gpucloud_libs.errors import Conflict, NotFound, QuotaExceeded
from gpucloud_libs.gpu_shares import GpuShare
from gpucloud_libs.http import decode_cursor, encode_cursor
from gpucloud_libs.identity import Identity
from gpucloud_libs.project_shares import unseen_work
from gpucloud_libs.tenants import require_active

from ..admission import (
    allowed_zones,
    claimant,
    known_spec,
    listed_projects,
    own_limit_refusal,
    project_of,
    project_refusal,
    user_may_start,
)
from ..documents import (
    JobDoc,
    JobRunDoc,
    SpecDoc,
    TenantDoc,
    in_project_view,
    workload_project,
)
from ..job_lifecycle import TERMINAL, JobState
from ..log_streams import LogStreams
from ..queue.line import Line
from ..schemas import Transition, mounts_storages
from ..store import DuplicateInstance, instance_key
from ..transitions import job_event
from ..wakeups import job_item
from ..workloads.admitted import NewWorkload
from ..workloads.parts import WorkloadParts
from ..workloads.replays import claim_idempotency_key, earlier, request_hash, same_request
from . import manifests as job_manifests
from .schemas import Job, JobCreate, JobPage, JobRun
from .store import JobStore


class JobHasNoRuns(Conflict):
    code = "job_has_no_runs"
    title = "The job has no runs yet"


class Jobs:
    def __init__(self, parts: WorkloadParts, jobs: JobStore, logs: LogStreams) -> None:
        self._images = parts.images
        self._placement = parts.placement
        self._logs = logs
        self._specs = parts.specs
        self._tenants = parts.tenants
        self._jobs = jobs
        self._lines = parts.lines
        self._requests = parts.requests
        self._storage = parts.storage
        self._wakeups = parts.wakeups

    async def submit(
        self, identity: Identity, body: JobCreate, idempotency_key: str | None
    ) -> tuple[Job, bool]:
        """Record a new job, queued (202), or return the one this request already made (200)."""
        identity.require_role("tenant-user", "tenant-admin")
        tenant_id = identity.require_tenant()
        self._images.admit(body.image, body.run_as_user, uid_field="runAsUser")
        hashed = request_hash(body, id_field="job_id")
        existing, tenant, spec = await asyncio.gather(
            earlier(self._jobs, tenant_id, body.job_id, idempotency_key),
            self._tenants.get(tenant_id),
            self._specs.get(body.spec_name),
        )
        if existing is not None:
            return await self._replay(existing, hashed, identity), False
        tenant = user_may_start(require_active(tenant, service="instances"), identity.subject)
        project = project_of(tenant, identity, body.project)
        spec = known_spec(body.spec_name, spec)
        _fits_quota(tenant, spec, body.pods, identity.subject, project)
        zones = allowed_zones(spec, body.zone)
        placed = await self._placement.choose(
            spec, region=body.region, zones=zones, volumes=mounts_storages(body.volumes)
        )
        storages = await self._storage.requested(identity, body.storage_ids, body.volumes, project)
        job_id = body.job_id or f"j-{secrets.token_hex(6)}"
        key = instance_key(tenant_id, job_id)
        again = await claim_idempotency_key(self._jobs, tenant_id, idempotency_key, key)
        if again is not None:  # a concurrent request with the same key got there first
            return await self._replay(again, hashed, identity), False
        new = NewWorkload(
            key=key, workload_id=job_id, identity=identity, tenant=tenant, spec=spec,
            zones=zones, placed=placed, storages=storages, request_hash=hashed,
            idempotency_key=idempotency_key, project=project,
        )  # fmt: skip
        doc = _job_document(new, body)
        try:
            await self._jobs.insert(doc)
        except DuplicateInstance:
            again = await self._jobs.get(key)
            if again is None:
                raise Conflict("a concurrent request is creating this job; retry") from None
            return await self._replay(again, hashed, identity), False
        await self._wakeups.wake(job_item(key))
        return await self.view(doc, new=True), True

    async def _replay(self, existing: JobDoc, hashed: str, caller: Identity) -> Job:
        job_id = existing["job_id"]
        same_request(
            existing, hashed, f"job {job_id!r}", caller=caller, verb="submitted", job_id=job_id
        )
        return await self.view(existing)

    async def _owned(self, identity: Identity, job_id: str) -> JobDoc:
        doc = await self._jobs.get(instance_key(identity.require_tenant(), job_id))
        if doc is None or not in_project_view(doc, identity):
            # Another tenant's job (or project's) and a missing one look the same.
            raise unseen_work("job", job_id, identity.projects)
        return doc

    async def get(self, identity: Identity, job_id: str) -> Job:
        doc, cancel_requested = await asyncio.gather(
            self._owned(identity, job_id),
            self._requests.requested(instance_key(identity.require_tenant(), job_id), "cancel"),
        )
        return await self.view(doc, cancel_requested=cancel_requested)

    async def list(
        self,
        identity: Identity,
        *,
        states: list[str] | None,
        cursor: str | None,
        limit: int,
        tenant_id: str | None = None,
        project: str | None = None,
    ) -> JobPage:
        # A platform admin sees every tenant (or the one asked for); others their own.
        scope = tenant_id if identity.is_platform_admin else identity.require_tenant()
        after = decode_cursor(cursor) if cursor else None
        docs = await self._jobs.page(
            scope, states=states, after=after, limit=limit + 1,
            projects=listed_projects(identity, project),
        )  # fmt: skip
        more = len(docs) > limit
        docs = docs[:limit]
        lines: dict[str, Line] = {}
        items = [await self.view(doc, lines=lines) for doc in docs]
        return JobPage(items=items, next_cursor=encode_cursor(docs[-1]["_id"]) if more else None)

    async def cancel(self, identity: Identity, job_id: str) -> Job:
        """Ask for the job's cancellation; the controller deletes its pods and records
        `cancelled`. A job that already ended is returned as it is."""
        doc = await self._owned(identity, job_id)
        if JobState(doc["state"]) in TERMINAL:
            return await self.view(doc)
        await self._requests.request(doc["_id"], "cancel")
        await self._wakeups.wake(job_item(doc["_id"]))
        return await self.view(doc, cancel_requested=True)

    async def logs(
        self,
        identity: Identity,
        job_id: str,
        *,
        run_id: str | None,
        follow: bool,
        tail_lines: int | None,
    ) -> AsyncIterator[bytes]:
        """One run's log (by default the latest run's), as the kubelet serves it; with
        `follow`, as it grows. Errors come before the first byte, so they answer as
        problems, not as a broken stream."""
        doc = await self._owned(identity, job_id)
        runs = doc["runs"]
        if run_id is None:
            if not runs:
                raise JobHasNoRuns(
                    f"job {job_id!r} is {doc['state']}: no pod has run yet", state=doc["state"]
                )
            run_id = max(
                runs, key=lambda rid: (runs[rid].get("scheduled_at") or doc["created_at"], rid)
            )
        elif run_id not in runs:
            raise NotFound(f"job {job_id!r} has no run {run_id!r}")
        pod_name = f"{job_manifests.job_object_name(job_id)}-{run_id}"
        gone = (
            f"the logs of run {run_id!r} are no longer kept (a finished job's pods are kept "
            "for a day)"
        )
        return await self._logs.open(
            doc["tenant_id"], doc["namespace"], pod_name, cluster=doc.get("cluster"),
            follow=follow, tail_lines=tail_lines, gone=gone, ended=lambda: self._run_ended(doc["_id"], run_id),
        )  # fmt: skip

    async def _run_ended(self, key: str, run_id: str) -> bool:
        doc = await self._jobs.get(key)
        run = None if doc is None else doc["runs"].get(run_id)
        return run is None or run.get("ended_at") is not None

    async def view(
        self,
        doc: JobDoc,
        *,
        cancel_requested: bool = False,
        lines: dict[str, Line] | None = None,
        new: bool = False,
    ) -> Job:
        """The job as the API shows it; a queued job with its place in the queue.
        `lines` shares each tenant's line between the items of one page; a `new` job
        (just submitted) is placed from its tenant's priority bands."""
        queue = await self._lines.place(job_item(doc["_id"]), doc, lines=lines, new=new)
        runs = doc.get("runs") or {}
        return Job(
            job_id=doc["job_id"],
            tenant_id=doc["tenant_id"],
            state=doc["state"],
            reason=doc.get("reason"),
            message=doc.get("message"),
            exit_code=doc.get("exit_code"),
            queue=queue,
            spec_name=doc["spec_name"],
            project=workload_project(doc),
            gpu_type=doc["gpu_type"],
            gpu_count=doc["gpu_count"],
            image=doc["image"],
            cluster=self._placement.cluster_of(doc),
            command=doc.get("command"),
            args=doc.get("args"),
            parallelism=doc["parallelism"],
            completions=doc["completions"],
            nodes=doc.get("nodes"),
            retry_limit=doc["retry_limit"],
            deadline_seconds=doc.get("deadline_seconds"),
            priority=doc["priority"],
            cancel_requested=cancel_requested and JobState(doc["state"]) not in TERMINAL,
            succeeded_runs=sum(run["state"] == "succeeded" for run in runs.values()),
            failed_runs=sum(run["state"] == "failed" for run in runs.values()),
            runs=[_run_view(run_id, run) for run_id, run in sorted(runs.items())],
            revision=doc["revision"],
            created_at=aware(doc["created_at"]),
            updated_at=aware(doc["updated_at"]),
            history=[
                Transition(state=h["state"], at=aware(h["at"]), reason=h.get("reason"))
                for h in doc.get("history", [])
            ],
        )


def _run_view(run_id: str, run: JobRunDoc) -> JobRun:
    return JobRun(
        run_id=run_id, state=run["state"], node=run.get("node"), exit_code=run.get("exit_code"),
        scheduled_at=aware_or_none(run.get("scheduled_at")),
        started_at=aware_or_none(run.get("started_at")),
        ended_at=aware_or_none(run.get("ended_at")),
    )  # fmt: skip


def job_gpus(spec: SpecDoc, parallelism: int) -> int:
    """The GPUs a job holds at most, and claims from its tenant's quota."""
    return GpuShare.of(spec).quota_gpus(spec["gpu_num"] * parallelism)


def _fits_quota(
    tenant: TenantDoc, spec: SpecDoc, parallelism: int, user_id: str, project: str
) -> None:
    """A job larger than the tenant's whole quota, borrowing included, than its user's
    own GPU limit or than its project's share (with what it may borrow) would wait for
    ever: refused now."""
    quota = tenant["quota"]
    wanted, limit = job_gpus(spec, parallelism), quota["max_gpus"] + quota.get("borrow_gpus", 0)
    who = claimant(tenant, user_id, project, may_borrow=True)
    capped = own_limit_refusal(who, 0, wanted=wanted) or project_refusal(who, 0, wanted=wanted)
    if capped is not None:
        raise capped
    if wanted > limit:
        raise QuotaExceeded(
            f"the job needs {wanted} GPUs at once and the tenant may hold {limit}"
            " (its quota and what it may borrow)",
            limit="max_gpus",
            limit_value=limit,
            in_use=0,
            requested=wanted,
        )


def _job_document(new: NewWorkload, body: JobCreate) -> JobDoc:
    """A newly submitted job as stored: `queued`, with its event in the outbox."""
    created = now()
    doc: JobDoc = {
        # mypy wants a ** item to name the optional keys too; those the kind
        # sets later stay absent.
        **new.document_fields("job_id"),  # type: ignore[typeddict-item]
        "image": body.image,
        "command": body.command,
        "args": body.args,
        "template": body.template.model_dump(by_alias=True),
        "parallelism": body.pods,
        "completions": body.completions or body.pods,
        "nodes": body.nodes,
        "retry_limit": body.retry_limit,
        "deadline_seconds": body.deadline_seconds,
        "priority": body.priority,
        "state": JobState.QUEUED.value,
        "reason": None,
        "message": None,
        "exit_code": None,
        "admitted_at": None,
        "runs": {},
        "sequence": 0,
        "revision": 0,
        "history": [],
        "outbox": [],
        "has_outbox": True,
        "created_at": created,
        "updated_at": created,
    }
    doc["outbox"] = [job_event(doc, JobState.QUEUED, created)]
    doc["sequence"] = 1
    doc["history"] = [{"state": JobState.QUEUED.value, "at": created, "reason": None}]
    return doc
