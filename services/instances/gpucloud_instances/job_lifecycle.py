"""The batch job lifecycle: a job's states, its runs' states, and what Kubernetes says.

    queued ─► admitted ─► running ─► succeeded
      ▲ │         ├───────────┴────► failed(reason, exit code)
      │ └─────────┴───────────┴────► cancelled
      │           └───────────┴──► preempting ─► cancelled
      └─────────────────────────────────┘

A job that borrowed GPUs beyond its tenant's quota is preempted when another
tenant's guaranteed work needs them (docs/queue.md): its Kubernetes Job and pods
are deleted, and once they are gone it is queued again, in its old place. Each
admission runs a fresh Kubernetes Job; its runs are told apart by `admission`.

A job runs as a Kubernetes Job; each of its pods is a *run* (an attempt, or one
of its parallel pods). Runs are what hold GPUs, so they are what metering bills:

    scheduled ─► running ─► succeeded | failed

A run holds its GPUs from the moment its pod is bound to a node until its
container ends, as Kubernetes timestamps them. A job ends only once every run
has ended, and a succeeded job ends at its last run's end: the job's completion
time and the end of its billing are the same instant. Everything here is pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from gpucloud_libs.clock import aware

from .lifecycle import timestamp


class JobState(StrEnum):
    QUEUED = "queued"
    ADMITTED = "admitted"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    PREEMPTING = "preempting"


#: The reason of a `preempting` transition, and of the `queued` one after it.
PREEMPTED = "preempted"


class JobFailure(StrEnum):
    RETRIES_EXHAUSTED = "retries_exhausted"  # more runs failed than the retry limit allows
    DEADLINE_EXCEEDED = "deadline_exceeded"
    IMAGE_PULL_ERROR = "image_pull_error"
    UNSCHEDULABLE = "unschedulable"  # no node of the spec's type could ever hold a run
    STORAGE_UNAVAILABLE = "storage_unavailable"
    JOB_LOST = "job_lost"  # the Kubernetes Job vanished before it ended
    JOBSET_UNAVAILABLE = "jobset_unavailable"  # a multi-node job on a cluster without JobSet
    CLUSTER_LOST = "cluster_lost"  # its cluster stopped answering for longer than the grace


class RunState(StrEnum):
    SCHEDULED = "scheduled"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


LIVE = frozenset({JobState.QUEUED, JobState.ADMITTED, JobState.RUNNING, JobState.PREEMPTING})
TERMINAL = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})
RUN_ENDED = frozenset({RunState.SUCCEEDED, RunState.FAILED})

JOB_ALLOWED: dict[JobState, frozenset[JobState]] = {
    JobState.QUEUED: frozenset({JobState.ADMITTED, JobState.FAILED, JobState.CANCELLED}),
    JobState.ADMITTED: frozenset(
        {
            JobState.RUNNING,
            JobState.SUCCEEDED,
            JobState.FAILED,
            JobState.CANCELLED,
            JobState.PREEMPTING,
        }
    ),
    JobState.RUNNING: frozenset(
        {JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.PREEMPTING}
    ),
    JobState.PREEMPTING: frozenset({JobState.QUEUED, JobState.CANCELLED}),
    JobState.SUCCEEDED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.CANCELLED: frozenset(),
}


@dataclass(frozen=True)
class RunObservation:
    """What a run's pod says. `state` None: not bound to a node yet (holds nothing)."""

    run_id: str
    state: RunState | None
    at: dict[RunState, datetime]
    node: str | None = None
    #: Whether its container started (a run deleted while still pulling never did).
    started: bool = False
    exit_code: int | None = None
    #: Set when the run's image cannot be pulled: the job cannot make progress.
    image_pull_error: str | None = None
    #: Set while the scheduler finds no node for the run.
    unschedulable: str | None = None


_IMAGE_PULL = {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}


def run_id(pod_name: str, job_object_name: str) -> str:
    """The suffix the Job controller gave the pod: unique within the job."""
    return pod_name.removeprefix(f"{job_object_name}-")


def observe_run(
    pod: dict[str, Any], *, job_object_name: str, now: datetime, gone_at: datetime | None
) -> RunObservation:
    """Map one of the job's pods to its run's state.

    `gone_at` is when the pod was seen deleted: a run that had not ended by then
    ended at that moment (a cancelled job's pods, a deadline's).
    """
    metadata, spec, status = pod.get("metadata", {}), pod.get("spec", {}), pod.get("status", {})
    rid = run_id(metadata.get("name", ""), job_object_name)
    node = spec.get("nodeName")
    conditions = {c["type"]: c for c in status.get("conditions") or []}
    at: dict[RunState, datetime] = {state: now for state in RunState}
    if not node:
        scheduled = conditions.get("PodScheduled", {})
        reason = scheduled.get("message") if scheduled.get("reason") == "Unschedulable" else None
        return RunObservation(rid, None, at, unschedulable=None if gone_at else reason)
    at[RunState.SCHEDULED] = timestamp(
        conditions.get("PodScheduled", {}).get("lastTransitionTime")
        or metadata.get("creationTimestamp"),
        now,
    )
    container = _main_container(status)
    terminated = (container.get("state") or {}).get("terminated") or {}
    phase = status.get("phase")
    # The container's own start; the pod's startTime precedes the image pull.
    started_at = terminated.get("startedAt") or (
        (container.get("state") or {}).get("running") or {}
    ).get("startedAt")
    started = bool(started_at) or phase == "Running"
    at[RunState.RUNNING] = max(
        timestamp(started_at or status.get("startTime"), now), at[RunState.SCHEDULED]
    )
    if phase in {"Succeeded", "Failed"}:
        state = RunState.SUCCEEDED if phase == "Succeeded" else RunState.FAILED
        at[state] = timestamp(terminated.get("finishedAt"), gone_at or now)
        return RunObservation(rid, state, at, node, started, terminated.get("exitCode"))
    if gone_at is not None:
        at[RunState.FAILED] = gone_at
        return RunObservation(rid, RunState.FAILED, at, node, started)
    waiting = (container.get("state") or {}).get("waiting") or {}
    if waiting.get("reason") in _IMAGE_PULL:
        message = waiting.get("message") or waiting["reason"]
        return RunObservation(rid, RunState.SCHEDULED, at, node, image_pull_error=message)
    return RunObservation(
        rid, RunState.RUNNING if started else RunState.SCHEDULED, at, node, started
    )


def _main_container(status: dict[str, Any]) -> dict[str, Any]:
    for container in status.get("containerStatuses") or []:
        if container.get("name") == "workload":
            return dict(container)
    return {}


def run_steps(
    current: RunState | None, observed: RunObservation, *, not_before: datetime
) -> list[tuple[RunState, datetime]]:
    """The run's transitions from `current` to what was observed, in order, filling
    in skipped ones (a run first seen ended was still scheduled, and ran if its pod
    started); never earlier than the step before.

    `not_before` is the latest time the platform recorded itself that the run cannot
    precede: its workload's admission, the run's own last step, the moment its pod
    was first seen. Kubernetes' times are rounded down to the second, so they may
    move a step later than that, never earlier: nothing is billed before it."""
    if observed.state is None or current in RUN_ENDED:
        return []  # nothing held yet, or an ended run, which does not come back
    wanted = [RunState.SCHEDULED]
    if observed.started:
        wanted.append(RunState.RUNNING)
    if observed.state in RUN_ENDED:
        wanted.append(observed.state)
    if current is not None:
        wanted = wanted[wanted.index(current) + 1 :] if current in wanted else wanted[1:]
    steps: list[tuple[RunState, datetime]] = []
    for state in wanted:
        at = max(observed.at[state], steps[-1][1] if steps else not_before)
        steps.append((state, at))
    return steps


def run_floor(
    admitted_at: datetime | None, run: Mapping[str, Any] | None, seen_at: datetime | None
) -> datetime:
    """The earliest a run's next step may be recorded at: the latest of its workload's
    admission, its own steps so far and when its pod was first seen. All three are
    the platform's own microsecond clock, not Kubernetes' rounded seconds."""
    recorded = [aware(at) for at in (run or {}).values() if isinstance(at, datetime)]
    candidates = [at for at in (admitted_at, seen_at, *recorded) if at is not None]
    return max(candidates, default=datetime.min.replace(tzinfo=UTC))


@dataclass(frozen=True)
class RunRecord:
    """A run as the job document holds it."""

    state: RunState
    started_at: datetime | None
    ended_at: datetime | None
    exit_code: int | None


@dataclass(frozen=True)
class JobObservation:
    state: JobState
    at: datetime
    reason: str | None = None
    exit_code: int | None = None
    message: str | None = None
    #: When its first run started, if one did.
    started_at: datetime | None = None


_FAILURE_REASONS = {
    "BackoffLimitExceeded": JobFailure.RETRIES_EXHAUSTED,
    "DeadlineExceeded": JobFailure.DEADLINE_EXCEEDED,
}


def observe_job(
    job: dict[str, Any], runs: dict[str, RunRecord], *, now: datetime
) -> JobObservation:
    """The job's state from its Kubernetes Job (or JobSet) and its recorded runs.

    A job ends only once every run has ended, at the last run's end, so no GPU
    time is billed past the job's own end.
    """
    conditions = {
        c["type"]: c
        for c in job.get("status", {}).get("conditions") or []
        if c.get("status") == "True"
    }
    all_ended = all(run.state in RUN_ENDED for run in runs.values())
    last_end = max((run.ended_at for run in runs.values() if run.ended_at), default=None)
    started_at = min((run.started_at for run in runs.values() if run.started_at), default=None)
    # A Job says `Complete`; a multi-node job's JobSet says `Completed`.
    complete = conditions.get("Complete") or conditions.get("Completed")
    if complete is not None and all_ended:
        at = last_end or timestamp(complete.get("lastTransitionTime"), now)
        return JobObservation(JobState.SUCCEEDED, at, started_at=started_at)
    if "Failed" in conditions and all_ended:
        condition = conditions["Failed"]
        reason = _FAILURE_REASONS.get(condition.get("reason", ""), JobFailure.RETRIES_EXHAUSTED)
        failed = [run for run in runs.values() if run.state == RunState.FAILED and run.ended_at]
        latest = max(failed, key=lambda run: run.ended_at or now, default=None)
        return JobObservation(
            JobState.FAILED,
            last_end or timestamp(condition.get("lastTransitionTime"), now),
            reason.value,
            latest.exit_code if latest else None,
            condition.get("message"),
            started_at,
        )
    if started_at is not None:
        return JobObservation(JobState.RUNNING, started_at, started_at=started_at)
    return JobObservation(JobState.ADMITTED, now)
