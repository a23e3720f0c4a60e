"""What a job's pods and Kubernetes Job say, as the job's and its runs' transitions.

Pure reading of the controller's cache: the reconciler (reconciler.py) records what
this returns, in one guarded update.
"""

from __future__ import annotations

from datetime import datetime

from gpucloud_libs.clock import aware, aware_or_none, now, now_as_stored
from gpucloud_libs.mongo import Document
from gpucloud_libs.outbox import OutboxEntry

from ..controller.cache import ClusterCache
from ..documents import JobDoc, JobRunDoc
from ..job_lifecycle import (
    JOB_ALLOWED,
    RUN_ENDED,
    TERMINAL,
    JobFailure,
    JobObservation,
    JobState,
    RunObservation,
    RunRecord,
    RunState,
    observe_job,
    observe_run,
    run_floor,
    run_id,
    run_steps,
)
from ..transitions import run_event
from . import manifests as job_manifests

Step = tuple[JobState, datetime, str | None, int | None]


class JobObserver:
    def __init__(self, cache: ClusterCache) -> None:
        self._cache = cache

    def runs(
        self, doc: JobDoc
    ) -> tuple[dict[str, JobRunDoc], list[OutboxEntry], list[RunObservation]]:
        """The runs after what the cached pods say, their transitions' events, and what
        each pod still there says."""
        at = now_as_stored()  # a run's end may be this instant: recorded and billed
        runs: dict[str, JobRunDoc] = {rid: JobRunDoc(**run) for rid, run in doc["runs"].items()}
        events: list[OutboxEntry] = []
        job_name = job_manifests.job_object_name(doc["job_id"])
        pods = self._cache.job_pods.get(doc["_id"], {})
        seen: set[str] = set()
        present: list[RunObservation] = []
        admitted_at = aware_or_none(doc["admitted_at"])
        for job_pod in pods.values():
            observed = observe_run(
                job_pod.pod, job_object_name=job_name, now=at, gone_at=job_pod.gone_at
            )
            seen.add(observed.run_id)
            if job_pod.gone_at is None:
                present.append(observed)
            run = runs.get(observed.run_id)
            current = RunState(run["state"]) if run else None
            steps = run_steps(
                current, observed, not_before=run_floor(admitted_at, run, job_pod.seen_at)
            )
            if not steps:
                continue
            if run is None:
                node = observed.node
                run = {"state": "", "sequence": 0, "node": node, "zone": self._cache.zone_of(node),
                       "scheduled_at": None, "started_at": None, "ended_at": None, "exit_code": None,
                       "admission": doc.get("admissions", 1)}  # fmt: skip
            for state, step_at in steps:
                if state == RunState.SCHEDULED:
                    run["scheduled_at"] = step_at
                if state == RunState.RUNNING:
                    run["started_at"] = step_at
                if state in RUN_ENDED:
                    run["ended_at"], run["exit_code"] = step_at, observed.exit_code
                events.append(run_event(doc, observed.run_id, run, state, step_at))
                run["state"], run["sequence"] = state.value, run["sequence"] + 1
            runs[observed.run_id] = run
        # A pod gone whose end went unseen (a relist after a restart).
        events += end_runs(doc, runs, at, keep=seen)
        return runs, events, present

    def job_steps(
        self,
        doc: JobDoc,
        runs: dict[str, JobRunDoc],
        observed_runs: list[RunObservation],
        *,
        cancel: bool,
    ) -> tuple[list[Step], Document]:
        """The job's own transitions, from its Job and runs (or its cancellation)."""
        state = JobState(doc["state"])
        if state in TERMINAL:
            return [], {}
        at = now()
        if cancel:
            return [(JobState.CANCELLED, at, None, None)], {}
        if state == JobState.PREEMPTING:
            return [], {}  # its end is decided by reconcile, once its pods are gone
        job = self._cache.jobs.get(doc["_id"])
        if job is None:
            if state == JobState.RUNNING:
                return [(JobState.FAILED, at, JobFailure.JOB_LOST.value, None)], {
                    "message": "the Kubernetes Job was deleted outside gpucloud"
                }
            return [], {}
        blocked = self._blocked(doc, observed_runs)
        if blocked is not None:
            return [(JobState.FAILED, at, blocked.reason, None)], {"message": blocked.message}
        records = {
            rid: RunRecord(
                RunState(run["state"]),
                aware_or_none(run.get("started_at")),
                aware_or_none(run.get("ended_at")),
                run.get("exit_code"),
            )
            for rid, run in runs.items()
            # An earlier admission's runs ended with its preemption.
            if run.get("admission", 1) == doc.get("admissions", 1)
        }
        observed = observe_job(job, records, now=at)
        last_at = aware(doc["history"][-1]["at"])
        return _path(state, observed, last_at), (
            {"message": observed.message} if observed.state == JobState.FAILED else {}
        )

    def _blocked(self, doc: JobDoc, observed_runs: list[RunObservation]) -> JobObservation | None:
        """A run that can never start fails the job: its image cannot be pulled, or no
        node of the fleet could ever hold it. (One that waits for free GPUs waits.)"""
        for observed in observed_runs:
            if observed.image_pull_error:
                return JobObservation(
                    JobState.FAILED, now(), JobFailure.IMAGE_PULL_ERROR.value,
                    message=observed.image_pull_error,
                )  # fmt: skip
            if observed.unschedulable and not self._cache.fits_fleet(doc):
                return JobObservation(
                    JobState.FAILED, now(), JobFailure.UNSCHEDULABLE.value,
                    message=f"no {doc['gpu_type']} node can hold {doc['gpu_count']} GPUs: "
                    f"{observed.unschedulable}",
                )  # fmt: skip
        return None

    def drained(self, doc: JobDoc, runs: dict[str, JobRunDoc]) -> bool:
        """Whether a preempted job's Kubernetes Job and pods are all gone: its GPUs are
        free, and a new Job of the same name can be made."""
        pods = self._cache.job_pods.get(doc["_id"], {})
        return (
            doc["_id"] not in self._cache.jobs
            and not any(pod.live for pod in pods.values())
            and all(RunState(run["state"]) in RUN_ENDED for run in runs.values())
        )

    def forget_recorded_pods(self, doc: JobDoc) -> None:
        job_name = job_manifests.job_object_name(doc["job_id"])
        for name, job_pod in list(self._cache.job_pods.get(doc["_id"], {}).items()):
            run = doc["runs"].get(run_id(name, job_name))
            if job_pod.gone_at is not None and (run is None or RunState(run["state"]) in RUN_ENDED):
                self._cache.forget_job_pod(doc["_id"], name)


def _path(current: JobState, observed: JobObservation, last_at: datetime) -> list[Step]:
    """The job's steps from `current` to what was observed: through `running` when a
    run started before the job ended; never backwards, never before `last_at`."""
    if observed.state == current or observed.state not in JOB_ALLOWED[current]:
        return []
    steps: list[Step] = []
    if (
        current == JobState.ADMITTED
        and observed.state in TERMINAL
        and observed.started_at is not None
    ):
        last_at = max(observed.started_at, last_at)
        steps.append((JobState.RUNNING, last_at, None, None))
    at = max(observed.at, last_at)
    steps.append((observed.state, at, observed.reason, observed.exit_code))
    return steps


def end_runs(
    doc: JobDoc, runs: dict[str, JobRunDoc], at: datetime, *, keep: set[str] | None = None
) -> list[OutboxEntry]:
    """End every run not ended yet (but those in `keep`) as failed at `at`, or at its
    own last moment where that is later; their events."""
    events: list[OutboxEntry] = []
    for rid, run in runs.items():
        if rid in (keep or set()) or RunState(run["state"]) in RUN_ENDED:
            continue
        moments = [aware(m) for m in (run["scheduled_at"], run["started_at"]) if m is not None]
        ended = max([at, *moments])
        run["ended_at"], run["exit_code"] = ended, None
        events.append(run_event(doc, rid, run, RunState.FAILED, ended))
        run["state"], run["sequence"] = RunState.FAILED.value, run["sequence"] + 1
    return events
