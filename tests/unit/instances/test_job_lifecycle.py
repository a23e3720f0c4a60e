"""The pure batch job lifecycle: what a run's pod and a Kubernetes Job mean."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from gpucloud_instances.job_lifecycle import (
    JobState,
    RunRecord,
    RunState,
    observe_job,
    observe_run,
    run_floor,
    run_steps,
)
from gpucloud_instances.queue.line import Line

AT = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
#: A floor that does not bind: before everything the pods say.
EARLIER = AT - timedelta(hours=1)
JOB = "job-train"


def iso(seconds: int) -> str:
    return (AT + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def pod(phase: str, *, node: str | None = "n1", exit_code: int | None = None) -> dict[str, Any]:
    """A pod of the job, scheduled at +0 s, its container started at +2 s, ended at +5 s."""
    container: dict[str, Any] = {"name": "workload", "state": {"running": {"startedAt": iso(2)}}}
    if phase in {"Succeeded", "Failed"}:
        container["state"] = {
            "terminated": {"startedAt": iso(2), "finishedAt": iso(5), "exitCode": exit_code or 0}
        }
    if phase == "Pending":
        container["state"] = {"waiting": {"reason": "ContainerCreating"}}
    status: dict[str, Any] = {
        "phase": phase,
        "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": iso(0)}],
        "containerStatuses": [container],
    }
    return {"metadata": {"name": f"{JOB}-abcde"}, "spec": {"nodeName": node}, "status": status}


def observe(manifest: dict[str, Any], gone_at: datetime | None = None) -> Any:
    return observe_run(
        manifest, job_object_name=JOB, now=AT + timedelta(seconds=9), gone_at=gone_at
    )


def test_a_run_first_seen_ended_passes_through_every_state_with_the_pods_own_times() -> None:
    observed = observe(pod("Succeeded"))
    assert observed.run_id == "abcde"
    assert run_steps(None, observed, not_before=EARLIER) == [
        (RunState.SCHEDULED, AT),
        (RunState.RUNNING, AT + timedelta(seconds=2)),
        (RunState.SUCCEEDED, AT + timedelta(seconds=5)),
    ]
    assert run_steps(RunState.RUNNING, observed, not_before=EARLIER) == [
        (RunState.SUCCEEDED, AT + timedelta(seconds=5))
    ]
    assert run_steps(RunState.SUCCEEDED, observed, not_before=EARLIER) == []


def test_a_run_never_starts_before_its_admission_though_kubernetes_rounds_down() -> None:
    """The pod's times are whole seconds; the admission is the platform's own clock.
    A run bound in the second its job was admitted starts at the admission, not at
    the rounded-down second before it, and its later steps keep their order."""
    admitted = AT + timedelta(microseconds=231_456)
    steps = run_steps(None, observe(pod("Succeeded")), not_before=admitted)
    assert steps == [
        (RunState.SCHEDULED, admitted),
        (RunState.RUNNING, AT + timedelta(seconds=2)),
        (RunState.SUCCEEDED, AT + timedelta(seconds=5)),
    ]
    # A run already recorded as scheduled after its own floor never steps back.
    recorded = {"scheduled_at": AT + timedelta(seconds=2, microseconds=500_000)}
    floor = run_floor(admitted, recorded, seen_at=None)
    assert floor == recorded["scheduled_at"]
    [(state, at)] = run_steps(RunState.SCHEDULED, observe(pod("Running")), not_before=floor)
    assert (state, at) == (RunState.RUNNING, floor)
    # The pod first seen by the watch after the admission: that moment is the floor.
    seen = AT + timedelta(seconds=3, microseconds=10)
    assert run_floor(admitted, None, seen_at=seen) == seen


def test_a_failed_run_carries_its_exit_code() -> None:
    observed = observe(pod("Failed", exit_code=3))
    assert observed.state == RunState.FAILED
    assert observed.exit_code == 3


def test_an_unbound_run_holds_nothing_and_a_deleted_one_ends_when_it_was_deleted() -> None:
    assert run_steps(None, observe(pod("Pending", node=None)), not_before=EARLIER) == []
    gone = AT + timedelta(seconds=7)
    deleted = observe(pod("Pending"), gone_at=gone)  # bound, never started, then deleted
    assert run_steps(None, deleted, not_before=EARLIER) == [
        (RunState.SCHEDULED, AT),
        (RunState.FAILED, gone),
    ]
    running = observe(pod("Running"), gone_at=gone)
    assert run_steps(RunState.RUNNING, running, not_before=EARLIER) == [(RunState.FAILED, gone)]


def test_an_image_that_cannot_be_pulled_is_reported() -> None:
    manifest = pod("Pending")
    manifest["status"]["containerStatuses"][0]["state"] = {
        "waiting": {"reason": "ImagePullBackOff", "message": "no such image"}
    }
    assert observe(manifest).image_pull_error == "no such image"


def record(state: RunState, started: int | None, ended: int | None) -> RunRecord:
    at = {
        k: None if v is None else AT + timedelta(seconds=v)
        for k, v in (("s", started), ("e", ended))
    }
    return RunRecord(state, at["s"], at["e"], 3 if state == RunState.FAILED else 0)


def kube_job(condition: str | None, reason: str = "") -> dict[str, Any]:
    conditions = (
        [{"type": condition, "status": "True", "reason": reason, "lastTransitionTime": iso(30)}]
        if condition
        else []
    )
    return {"status": {"conditions": conditions}}


def test_a_job_succeeds_at_its_last_runs_end_and_only_once_every_run_ended() -> None:
    runs = {"a": record(RunState.SUCCEEDED, 2, 5), "b": record(RunState.SUCCEEDED, 3, 8)}
    done = observe_job(kube_job("Complete"), runs, now=AT + timedelta(seconds=40))
    assert (done.state, done.at) == (JobState.SUCCEEDED, AT + timedelta(seconds=8))
    assert done.started_at == AT + timedelta(seconds=2)
    runs["c"] = record(RunState.RUNNING, 4, None)
    still = observe_job(kube_job("Complete"), runs, now=AT + timedelta(seconds=40))
    assert still.state == JobState.RUNNING


def test_a_failed_job_names_why_and_its_last_failed_runs_exit_code() -> None:
    runs = {"a": record(RunState.FAILED, 2, 5), "b": record(RunState.FAILED, 12, 15)}
    failed = observe_job(kube_job("Failed", "BackoffLimitExceeded"), runs, now=AT)
    assert (failed.state, failed.reason, failed.exit_code) == (
        JobState.FAILED,
        "retries_exhausted",
        3,
    )
    late = observe_job(kube_job("Failed", "DeadlineExceeded"), runs, now=AT)
    assert late.reason == "deadline_exceeded"
    assert observe_job(kube_job(None), {}, now=AT).state == JobState.ADMITTED


def test_the_queue_position_counts_the_workloads_and_gpus_ahead() -> None:
    line = Line(["t/a", "t/b", "t/c"], [2, 6, 2], [5, 0, 0])
    position = line.position("t/c", 0, "quota")
    assert (position.position, position.gpus_ahead, position.reason) == (3, 8, "quota")
    # Before the admission queue's first pass over it, it waits for that pass.
    assert line.position("t/a", 5, None).reason == "admission"


def test_a_workload_the_line_does_not_hold_yet_stands_behind_its_priority() -> None:
    line = Line(["t/a", "t/b", "t/c"], [2, 6, 2], [5, 0, 0])
    assert line.bands == [[5, 1, 2], [0, 2, 8]]
    # Submitted since the last pass: behind everything of its priority or higher.
    assert (
        line.position("t/new", 0, None).position,
        line.position("t/new", 0, None).gpus_ahead,
    ) == (4, 10)
    assert (
        line.position("t/new", 5, None).position,
        line.position("t/new", 5, None).gpus_ahead,
    ) == (2, 2)
    assert line.position("t/new", 9, None).position == 1
