"""Job reconcile: admits queued jobs, runs them as Kubernetes Jobs, records what they do.

Runs in the job's worker, the document's only writer after its insert. One pass:
publish what an earlier pass recorded, then record the runs' transitions from
the cached pods, then the job's own from the cached Job, in one guarded update.
Decisions come from observed state, never from remembered events, so a restart
mid-operation converges: the Job's name is deterministic, its create idempotent.
"""

from __future__ import annotations

import asyncio
import logging

from gpucloud_libs.clock import aware, now, now_as_stored
from gpucloud_libs.gpu_shares import GpuShare
from gpucloud_libs.kube import ConflictError, NotFoundError, QuotaRejectedError
from gpucloud_libs.mongo import Document
from gpucloud_libs.naming import job_workload_id
from gpucloud_libs.outbox import OutboxEntry, publish_in_order
from gpucloud_libs.topics import JOB_LIFECYCLE

from ..documents import JobDoc, JobRunDoc
from ..job_lifecycle import (
    PREEMPTED,
    RUN_ENDED,
    TERMINAL,
    JobFailure,
    JobState,
    RunState,
)
from ..manifests import WorkloadPod
from ..queue.admissions import PREEMPT
from ..queue.decision import Waiting
from ..schemas import STORED, InstanceTemplate
from ..storages import StorageRefused
from ..transitions import job_event
from ..wakeups import ADMISSION, job_item
from ..workloads.reconciler import ClusterLost, ReconcilerParts, WorkloadReconciler
from . import manifests as job_manifests
from .observation import JobObserver, Step, end_runs
from .store import JobStore

log = logging.getLogger(__name__)

#: How soon a Job the namespace quota refused is created again.
QUOTA_RETRY_S = 2.0


class JobReconciler(WorkloadReconciler[JobDoc]):
    MAY_BORROW = True

    def __init__(
        self,
        parts: ReconcilerParts,
        jobs: JobStore,
    ) -> None:
        super().__init__(parts)
        self._jobs = jobs

    async def reconcile(self, key: str) -> None:
        try:
            await self._reconcile(key)
        except ClusterLost as lost:
            await self._lost_with_cluster(key, lost)

    async def _lost_with_cluster(self, key: str, lost: ClusterLost) -> None:
        """Its cluster stopped answering: a job that left the queue fails, its runs
        ended at the cluster's first silent look (the Job found when it answers again is
        deleted: `_STOPPED_BY_US`); a queued one waits, holding nothing there yet."""
        doc = await self._jobs.get(key)
        if doc is None or JobState(doc["state"]) in (*TERMINAL, JobState.QUEUED):
            return
        runs = {rid: JobRunDoc(**run) for rid, run in doc["runs"].items()}
        events = end_runs(doc, runs, lost.since)
        ends = [aware(r["ended_at"]) for r in runs.values() if r["ended_at"] is not None]
        at = max([lost.since, *ends, *(aware(step["at"]) for step in doc["history"][-1:])])
        step = (JobState.FAILED, at, JobFailure.CLUSTER_LOST.value, None)
        if await self._save(doc, [step], {"runs": runs, "message": lost.message}, events):
            await self._quota.release(doc["tenant_id"], job_workload_id(doc["job_id"]))
            self._queue.wake(ADMISSION)

    async def _reconcile(self, key: str) -> None:
        doc, cancel = await asyncio.gather(
            self._jobs.get(key), self._requests.requested(key, "cancel")
        )
        if doc is None:
            self._admissions.room.forget(job_item(key))
            return
        self._admissions.room.job(doc)
        await self._flush(doc)
        state = JobState(doc["state"])
        if state == JobState.QUEUED:
            if cancel:
                await self._save(doc, [(JobState.CANCELLED, now(), None, None)], {})
                self._queue.wake(ADMISSION)
            else:
                await self._follow_plan(doc, job_item(key))
            return
        observer = JobObserver(self._cluster(doc).cache)
        runs, run_events, observed = observer.runs(doc)
        steps, changes = observer.job_steps(doc, runs, observed, cancel=cancel)
        if state == JobState.PREEMPTING and not steps and observer.drained(doc, runs):
            # Its borrowed GPUs are free: give back the claim, then queue it again.
            await self._quota.release(doc["tenant_id"], job_workload_id(doc["job_id"]))
            steps = [(JobState.QUEUED, now(), PREEMPTED, None)]
            changes = {"admitted_at": None, "queue_reason": None}
            self._queue.wake(ADMISSION)
        elif (
            not steps
            and self._admissions.planned(job_item(key)) == PREEMPT
            and state in _PREEMPTIBLE
        ):
            self._admissions.take(job_item(key))
            steps = [(JobState.PREEMPTING, now(), PREEMPTED, None)]
            changes = {"message": PREEMPTED_MESSAGE}
        if steps or run_events or changes:
            saved = await self._save(doc, steps, {"runs": runs, **changes}, run_events)
            if saved is None:
                return
            doc = saved
        observer.forget_recorded_pods(doc)
        await self._act(doc)

    # --- admission (the pass is admissions.Admissions) -------------------------------

    async def _waits(self, doc: JobDoc, waiting: Waiting) -> None:
        nodes = doc.get("nodes")
        if nodes and (fitting := self._cluster(doc).cache.nodes_that_fit(doc)) < nodes:
            # A multi-node job needs that many nodes able to hold a pod: it would wait
            # for ever.
            step = (JobState.FAILED, now(), JobFailure.UNSCHEDULABLE.value, None)
            message = f"the job needs {nodes} nodes that can hold {doc['gpu_count']} " + (
                f"{doc['gpu_type']} GPUs each; the fleet has {fitting}"
            )
            await self._save(doc, [step], {"message": message})
            self._queue.wake(ADMISSION)
        elif waiting.reason != doc.get("queue_reason"):
            await self._save(doc, [], {"queue_reason": waiting.reason})

    async def _admit(self, doc: JobDoc, *, borrowing: bool) -> None:
        """Claim the job's quota and start it. The claim is the last word: the plan was
        made from figures that may have moved since. A borrowing job's claim may go past
        the quota by what the tenant may borrow."""
        gpus = GpuShare.of(doc).quota_gpus(doc["gpu_count"] * doc["parallelism"])
        workload = job_workload_id(doc["job_id"])
        if not await self._claim_quota(doc, workload, gpus, borrowing=borrowing):
            self._queue.wake(ADMISSION)  # the next pass plans again, from the figures now
            return
        admitted_at = now_as_stored()
        saved = await self._save(
            doc,
            [(JobState.ADMITTED, admitted_at, None, None)],
            {"admitted_at": admitted_at, "message": None, "queue_reason": None,
             "admissions": doc.get("admissions", 0) + 1},
        )  # fmt: skip
        if saved is None:
            await self._quota.release(doc["tenant_id"], job_workload_id(doc["job_id"]))
            return
        await self._create_job(saved)

    # --- actions ---------------------------------------------------------------------

    async def _act(self, doc: JobDoc) -> None:
        state = JobState(doc["state"])
        cache = self._cluster(doc).cache
        if state == JobState.PREEMPTING:
            if doc["_id"] in cache.jobs:
                await self._delete_job(doc)
            return
        if state not in TERMINAL:
            if state == JobState.ADMITTED and doc["_id"] not in cache.jobs:
                await self._create_job(doc)
            return
        if doc["_id"] in cache.jobs and (
            state == JobState.CANCELLED or doc["reason"] in _STOPPED_BY_US
        ):
            # Its pods stop now. Kubernetes stopped those of a job that failed on its own,
            # and keeps the Job a day for its logs.
            await self._delete_job(doc)
        live_pods = any(pod.live for pod in cache.job_pods.get(doc["_id"], {}).values())
        if not live_pods and all(RunState(r["state"]) in RUN_ENDED for r in doc["runs"].values()):
            await self._quota.release(doc["tenant_id"], job_workload_id(doc["job_id"]))
            self._queue.wake(ADMISSION)  # its quota and GPUs are free for the queue

    async def _delete_job(self, doc: JobDoc) -> None:
        """Delete the job's Kubernetes object (a Job, or a multi-node job's JobSet) and,
        through their owners, its pods."""
        kind = "JobSet" if doc.get("nodes") else "Job"
        name = job_manifests.job_object_name(doc["job_id"])
        await self._cluster(doc).kube.delete(kind, doc["namespace"], name, cascade=True)

    async def _create_job(self, doc: JobDoc) -> None:
        cluster = self._cluster(doc)
        if not await self._namespace_ready(doc, cluster):
            return
        storage_secrets = await self._attach_storages(doc, job_workload_id(doc["job_id"]))
        if storage_secrets is None:
            return
        pull_secrets = await self._pull_secrets.for_image(
            doc["tenant_id"], doc["namespace"], doc["image"], cluster.kube
        )
        template = InstanceTemplate.model_validate(doc["template"], context=STORED)
        pod = WorkloadPod.of(
            doc, image=doc["image"], template=template, storage_secrets=storage_secrets,
            pull_secrets=pull_secrets, command=doc.get("command"), args=doc.get("args"),
        )  # fmt: skip
        pods = job_manifests.JobPods(
            pod, doc["job_id"], doc["retry_limit"], doc.get("deadline_seconds")
        )
        nodes = doc.get("nodes")
        manifest = (
            job_manifests.job_set(pods, nodes=nodes)
            if nodes
            else job_manifests.batch_job(
                pods, parallelism=doc["parallelism"], completions=doc["completions"]
            )
        )
        try:
            created = await cluster.kube.create(manifest)
        except ConflictError:
            return  # created by an earlier attempt; the watch brings it
        except NotFoundError:
            # The cluster has no JobSet CRD: a multi-node job cannot run here.
            step = (JobState.FAILED, now(), JobFailure.JOBSET_UNAVAILABLE.value, None)
            message = "this cluster has no JobSet (sigs.k8s.io/jobset) for multi-node jobs"
            await self._save(doc, [step], {"message": message})
            return
        except QuotaRejectedError as error:
            # The namespace quota backs the API's own claim; a Job object is not a pod,
            # so this is unexpected: retry rather than lose the job.
            log.warning(
                "job refused by the namespace quota", extra={"job": doc["_id"], "error": str(error)}
            )
            self._queue.wake_later(QUOTA_RETRY_S, job_item(doc["_id"]))
            return
        cluster.cache.jobs.setdefault(doc["_id"], created)

    async def _project_gone(self, doc: JobDoc) -> None:
        await self._requests.request(doc["_id"], "cancel", reason="its project was deleted")
        self._queue.wake(job_item(doc["_id"]))

    async def _storage_refused(self, doc: JobDoc, error: StorageRefused) -> None:
        step = (JobState.FAILED, now(), JobFailure.STORAGE_UNAVAILABLE.value, None)
        await self._save(doc, [step], {"message": str(error)})

    # --- persistence and events ------------------------------------------------------

    async def _save(
        self,
        doc: JobDoc,
        steps: list[Step],
        changes: Document,
        run_events: list[OutboxEntry] | None = None,
    ) -> JobDoc | None:
        """Record the job's transitions (`steps`), its runs' events and other changes in
        one guarded update, then publish; None when the document moved meanwhile."""
        events = list(run_events or [])
        history = list(doc["history"])
        current = doc
        for state, at, reason, exit_code in steps:
            events.append(job_event(current, state, at, reason=reason, exit_code=exit_code))
            history.append({"state": state.value, "at": at, "reason": reason})
            current = {**current, "state": state.value, "sequence": current["sequence"] + 1}
        if steps:
            last_state, _, last_reason, last_exit = steps[-1]
            changes = {
                **changes, "state": last_state.value, "reason": last_reason,
                "exit_code": last_exit if last_exit is not None else changes.get("exit_code"),
                "sequence": current["sequence"], "history": history,
            }  # fmt: skip
        saved = await self._jobs.save(doc, changes, events)
        if saved is None:
            self._queue.wake(job_item(doc["_id"]))  # moved under us; look again
            return None
        self._admissions.room.job(saved)
        await self._flush(saved)
        return saved

    async def _flush(self, doc: JobDoc) -> None:
        """Publish the recorded events in order, then drop them (a crash in between
        republishes the same event ids, which consumers dedupe)."""
        if doc.get("outbox"):
            await publish_in_order(self._broker, JOB_LIFECYCLE, doc["outbox"])
            await self._jobs.clear_outbox(doc["_id"], doc["revision"])


#: A job transition to record: (state, at, reason, exit code).
_PREEMPTIBLE = frozenset({JobState.ADMITTED, JobState.RUNNING})
PREEMPTED_MESSAGE = (
    "preempted: its tenant borrowed these GPUs beyond its quota, and another tenant's"
    " guaranteed share needs them; it is queued again once its pods are gone"
)
#: Failures after which gpucloud itself removes the Job's pods.
_STOPPED_BY_US = frozenset(
    {
        JobFailure.IMAGE_PULL_ERROR.value, JobFailure.UNSCHEDULABLE.value,
        JobFailure.JOB_LOST.value, JobFailure.CLUSTER_LOST.value,
    }
)  # fmt: skip
