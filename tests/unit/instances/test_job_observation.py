"""What a batch job's pods and Kubernetes Job say, as the job's and its runs' transitions
(jobs/observation.py, JobObserver): read from a controller cache filled by hand, as
the watch would fill it. Covers the runs recorded and their billing events, a job's
own steps (succeeded, failed and why, cancelled, lost), and when a preempted job is
drained."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from gpucloud_instances.controller.cache import ClusterCache, TrackedPod
from gpucloud_instances.documents import JobDoc, JobRunDoc
from gpucloud_instances.job_lifecycle import JobState
from gpucloud_instances.jobs.observation import JobObserver
from gpucloud_libs.kube import KubeClient
from gpucloud_stack.fleet import gpu_node

H100 = "NVIDIA-H100-80GB-HBM3"
KEY = "acme/train"
#: Whole seconds, as Kubernetes writes its times, well before the observer's clock.
T0 = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=10)


def iso(seconds: int) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def a_cache() -> ClusterCache:
    cache = ClusterCache(
        KubeClient(None), wake=lambda _item: None, wake_stocks=lambda: None, node_lost_grace_s=120
    )
    cache.nodes = {
        "h1": gpu_node("h1", product=H100, gpus=8, zone="zone-a"),
        "h2": gpu_node("h2", product=H100, gpus=8, zone="zone-b"),
    }
    return cache


def a_job(**fields: Any) -> JobDoc:
    """Acme's job `train`, 2 GPUs a pod, admitted at T0 - 1 s."""
    admitted = T0 - timedelta(seconds=1)
    doc: dict[str, Any] = {
        "_id": KEY, "tenant_id": "acme", "job_id": "train", "user_id": "u-1",
        "spec_name": "h100x2", "gpu_type": H100, "gpu_count": 2, "zones": [],
        "state": "admitted", "sequence": 2, "admitted_at": admitted, "runs": {},
        "history": [{"state": "queued", "at": admitted - timedelta(seconds=5), "reason": None},
                    {"state": "admitted", "at": admitted, "reason": None}],
    }  # fmt: skip
    return cast(JobDoc, {**doc, **fields})


def a_pod(run: str, phase: str, *, node: str | None = "h1", exit_code: int = 0) -> dict[str, Any]:
    """A pod of the job: bound at +0 s, its container started at +2 s, ended at +5 s."""
    state: dict[str, Any] = {"running": {"startedAt": iso(2)}}
    if phase in {"Succeeded", "Failed"}:
        state = {"terminated": {"startedAt": iso(2), "finishedAt": iso(5), "exitCode": exit_code}}
    elif phase == "Pending":
        state = {"waiting": {"reason": "ContainerCreating"}}
    return {
        "metadata": {"name": f"job-train-{run}", "labels": {}},
        "spec": {"nodeName": node} if node else {},
        "status": {
            "phase": phase,
            "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": iso(0)}],
            "containerStatuses": [{"name": "workload", "state": state}],
        },
    }  # fmt: skip


def recorded(state: str, *, sequence: int = 1, admission: int = 1, **at: Any) -> JobRunDoc:
    run = {
        "state": state, "sequence": sequence, "node": "h1", "zone": "zone-a",
        "scheduled_at": T0, "started_at": None, "ended_at": None, "exit_code": None,
        "admission": admission, **at,
    }  # fmt: skip
    return cast(JobRunDoc, run)


def watch(cache: ClusterCache, *pods: dict[str, Any], gone_at: datetime | None = None) -> None:
    tracked = cache.job_pods.setdefault(KEY, {})
    for pod in pods:
        tracked[pod["metadata"]["name"]] = TrackedPod(pod, gone_at=gone_at)


def kube_job(condition: str | None = None, reason: str = "", message: str = "") -> dict[str, Any]:
    conditions = [
        {"type": condition, "status": "True", "reason": reason, "message": message,
         "lastTransitionTime": iso(30)}
    ] if condition else []  # fmt: skip
    return {"kind": "Job", "status": {"conditions": conditions}}


def states(events: list[Any]) -> list[tuple[str, str, int]]:
    """Each event's (run, state, sequence)."""
    data = [json.loads(event["value"]) for event in events]
    return [(d["run_id"], d["state"], d["sequence"]) for d in data]


def test_a_run_first_seen_running_is_recorded_scheduled_then_running_where_its_node_is() -> None:
    cache = a_cache()
    watch(cache, a_pod("x1", "Running", node="h2"))
    runs, events, present = JobObserver(cache).runs(a_job(admissions=2))
    run = runs["x1"]
    assert (run["state"], run["sequence"]) == ("running", 2)
    assert (run["node"], run["zone"]) == ("h2", "zone-b")
    assert (run["scheduled_at"], run["started_at"]) == (T0, T0 + timedelta(seconds=2))
    assert (run["ended_at"], run["exit_code"], run.get("admission")) == (None, None, 2)
    assert states(events) == [("x1", "scheduled", 1), ("x1", "running", 2)]
    assert [event["id"] for event in events] == ["acme/train/x1#1", "acme/train/x1#2"]
    assert [observed.run_id for observed in present] == ["x1"]


def test_a_recorded_run_that_ended_steps_once_to_its_end_with_its_exit_code() -> None:
    cache = a_cache()
    watch(cache, a_pod("x1", "Failed", exit_code=137))
    job = a_job(runs={"x1": recorded("running", sequence=2, started_at=T0 + timedelta(seconds=2))})
    runs, events, _ = JobObserver(cache).runs(job)
    assert states(events) == [("x1", "failed", 3)]
    assert json.loads(events[0]["value"])["exit_code"] == 137
    ended = runs["x1"]
    assert (ended["state"], ended["exit_code"]) == ("failed", 137)
    assert ended["ended_at"] == T0 + timedelta(seconds=5)
    assert job["runs"]["x1"]["state"] == "running"  # the document read is left as it was


def test_a_run_already_recorded_as_observed_makes_no_event() -> None:
    cache = a_cache()
    watch(cache, a_pod("x1", "Running"))
    job = a_job(runs={"x1": recorded("running", sequence=2, started_at=T0 + timedelta(seconds=2))})
    runs, events, present = JobObserver(cache).runs(job)
    assert events == []
    assert runs == job["runs"]
    assert len(present) == 1


def test_a_pod_waiting_for_a_node_holds_nothing_and_records_no_run() -> None:
    cache = a_cache()
    waiting = a_pod("x1", "Pending", node=None)
    waiting["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
         "message": "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."}
    ]  # fmt: skip
    watch(cache, waiting)
    runs, events, [observed] = JobObserver(cache).runs(a_job())
    assert (runs, events) == ({}, [])
    assert observed.unschedulable == "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."


def test_a_deleted_pod_ends_its_run_when_it_was_seen_deleted() -> None:
    cache = a_cache()
    gone = T0 + timedelta(seconds=7)
    watch(cache, a_pod("x1", "Running"), gone_at=gone)
    job = a_job(runs={"x1": recorded("running", sequence=2, started_at=T0 + timedelta(seconds=2))})
    runs, events, present = JobObserver(cache).runs(job)
    assert states(events) == [("x1", "failed", 3)]
    assert runs["x1"]["ended_at"] == gone
    assert present == []  # no longer there to say anything


def test_a_run_whose_pod_vanished_unseen_fails_now_and_an_ended_one_is_left_alone() -> None:
    before = datetime.now(UTC) - timedelta(milliseconds=1)
    job = a_job(
        runs={
            "lost": recorded("running", sequence=2, started_at=T0),
            "done": recorded("succeeded", sequence=3, ended_at=T0 + timedelta(seconds=5)),
        }
    )
    runs, events, _ = JobObserver(a_cache()).runs(job)
    assert states(events) == [("lost", "failed", 3)]
    lost = runs["lost"]
    assert (lost["state"], lost["exit_code"]) == ("failed", None)
    assert lost["ended_at"] is not None
    assert before <= lost["ended_at"] <= datetime.now(UTC)
    assert runs["done"] == job["runs"]["done"]


def test_an_ended_job_and_a_preempting_one_take_no_step_from_what_kubernetes_says() -> None:
    cache = a_cache()
    cache.jobs[KEY] = kube_job("Failed", "BackoffLimitExceeded")
    observer = JobObserver(cache)
    for state in ("succeeded", "failed", "cancelled"):
        assert observer.job_steps(a_job(state=state), {}, [], cancel=True) == ([], {})
    assert observer.job_steps(a_job(state="preempting"), {}, [], cancel=False) == ([], {})


def test_a_cancelled_job_is_cancelled_now_whatever_its_job_says() -> None:
    cache = a_cache()
    cache.jobs[KEY] = kube_job("Complete")
    [(state, at, reason, code)], extra = JobObserver(cache).job_steps(
        a_job(state="running"), {}, [], cancel=True
    )
    assert (state, reason, code, extra) == (JobState.CANCELLED, None, None, {})
    assert at > T0


def test_a_running_job_whose_kubernetes_job_vanished_is_lost() -> None:
    [(state, _, reason, _)], extra = JobObserver(a_cache()).job_steps(
        a_job(state="running"), {}, [], cancel=False
    )
    assert (state, reason) == (JobState.FAILED, "job_lost")
    assert extra == {"message": "the Kubernetes Job was deleted outside gpucloud"}


def test_an_admitted_job_whose_kubernetes_job_is_not_made_yet_waits() -> None:
    assert JobObserver(a_cache()).job_steps(a_job(), {}, [], cancel=False) == ([], {})


def test_a_run_whose_image_cannot_be_pulled_fails_the_job_with_the_pull_message() -> None:
    cache = a_cache()
    cache.jobs[KEY] = kube_job()
    pulling = a_pod("x1", "Pending")
    pulling["status"]["containerStatuses"][0]["state"] = {
        "waiting": {"reason": "ErrImagePull", "message": "manifest unknown"}
    }
    watch(cache, pulling)
    observer = JobObserver(cache)
    runs, _, present = observer.runs(a_job())
    [(state, _, reason, _)], extra = observer.job_steps(a_job(), runs, present, cancel=False)
    assert (state, reason) == (JobState.FAILED, "image_pull_error")
    assert extra == {"message": "manifest unknown"}


def unschedulable_pod() -> dict[str, Any]:
    pod = a_pod("x1", "Pending", node=None)
    pod["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "no room"}
    ]
    return pod


def test_a_run_no_node_of_the_fleet_could_ever_hold_fails_the_job() -> None:
    cache = a_cache()
    cache.jobs[KEY] = kube_job()
    watch(cache, unschedulable_pod())
    observer = JobObserver(cache)
    too_big = a_job(gpu_count=16)
    _, _, present = observer.runs(too_big)
    [(state, _, reason, _)], extra = observer.job_steps(too_big, {}, present, cancel=False)
    assert (state, reason) == (JobState.FAILED, "unschedulable")
    assert extra == {"message": f"no {H100} node can hold 16 GPUs: no room"}


def test_a_run_waiting_for_gpus_a_node_could_hold_keeps_waiting() -> None:
    cache = a_cache()
    cache.jobs[KEY] = kube_job()
    watch(cache, unschedulable_pod())
    observer = JobObserver(cache)
    _, _, present = observer.runs(a_job(gpu_count=8))
    assert observer.job_steps(a_job(gpu_count=8), {}, present, cancel=False) == ([], {})


def test_a_completed_job_passes_through_running_and_succeeds_at_its_last_runs_end() -> None:
    cache = a_cache()
    cache.jobs[KEY] = kube_job("Complete")
    runs = {
        "a": recorded("succeeded", started_at=T0 + timedelta(seconds=2), ended_at=T0 + timedelta(seconds=5)),
        "b": recorded("succeeded", started_at=T0 + timedelta(seconds=3), ended_at=T0 + timedelta(seconds=9)),
    }  # fmt: skip
    steps, extra = JobObserver(cache).job_steps(a_job(), runs, [], cancel=False)
    assert steps == [
        (JobState.RUNNING, T0 + timedelta(seconds=2), None, None),
        (JobState.SUCCEEDED, T0 + timedelta(seconds=9), None, None),
    ]
    assert extra == {}


def test_a_failed_job_says_why_with_its_last_failed_runs_exit_code_and_the_jobs_message() -> None:
    cache = a_cache()
    cache.jobs[KEY] = kube_job("Failed", "DeadlineExceeded", "Job was active longer than specified")
    runs = {
        "a": recorded("failed", started_at=T0, ended_at=T0 + timedelta(seconds=4), exit_code=143)
    }
    steps, extra = JobObserver(cache).job_steps(a_job(state="running"), runs, [], cancel=False)
    assert steps == [(JobState.FAILED, T0 + timedelta(seconds=4), "deadline_exceeded", 143)]
    assert extra == {"message": "Job was active longer than specified"}


def test_a_jobs_end_is_never_recorded_before_its_last_recorded_step() -> None:
    cache = a_cache()
    cache.jobs[KEY] = kube_job("Complete")
    latest = T0 + timedelta(seconds=20)
    job = a_job(state="running", history=[{"state": "running", "at": latest, "reason": None}])
    runs = {"a": recorded("succeeded", started_at=T0, ended_at=T0 + timedelta(seconds=5))}
    assert JobObserver(cache).job_steps(job, runs, [], cancel=False)[0] == [
        (JobState.SUCCEEDED, latest, None, None)
    ]


def test_a_complete_job_with_a_run_still_going_stays_running() -> None:
    cache = a_cache()
    cache.jobs[KEY] = kube_job("Complete")
    runs = {"a": recorded("running", started_at=T0)}
    assert JobObserver(cache).job_steps(a_job(state="running"), runs, [], cancel=False) == ([], {})


def test_a_preempted_job_is_drained_once_its_job_and_live_pods_are_gone_and_runs_ended() -> None:
    cache = a_cache()
    observer = JobObserver(cache)
    ended = {"x1": recorded("failed", ended_at=T0)}
    cache.jobs[KEY] = kube_job()
    assert not observer.drained(a_job(), ended)
    del cache.jobs[KEY]
    watch(cache, a_pod("x2", "Running"))
    assert not observer.drained(a_job(), ended)
    cache.job_pods[KEY]["job-train-x2"] = TrackedPod(a_pod("x2", "Running"), gone_at=T0)
    assert observer.drained(a_job(), ended)
    assert not observer.drained(a_job(), {**ended, "x2": recorded("running")})


def test_a_deleted_pod_is_forgotten_once_its_runs_end_is_recorded() -> None:
    cache = a_cache()
    watch(cache, a_pod("done", "Running"), a_pod("open", "Running"), gone_at=T0)
    watch(cache, a_pod("live", "Running"))
    job = a_job(runs={"done": recorded("failed", ended_at=T0), "open": recorded("running")})
    JobObserver(cache).forget_recorded_pods(job)
    assert sorted(cache.job_pods[KEY]) == ["job-train-live", "job-train-open"]
