"""How the instances service reads a pod's status: the mapping behind every transition."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gpucloud_instances.lifecycle import FailureReason, State, Step, observe_pod, path

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def pod(
    phase: str = "Running", *, node: str | None = "h100-zone-a-0", ready: bool = True, **status: Any
) -> dict[str, Any]:
    conditions = [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T11:59:50Z"}
    ]
    conditions.append(
        {
            "type": "Ready",
            "status": "True" if ready else "False",
            "lastTransitionTime": "2026-01-01T11:59:55Z",
        }
    )
    return {
        "metadata": {"creationTimestamp": "2026-01-01T11:59:49Z"},
        "spec": {"nodeName": node} if node else {},
        "status": {
            "phase": phase,
            "conditions": conditions,
            "startTime": "2026-01-01T11:59:52Z",
            **status,
        },
    }


def waiting(reason: str) -> dict[str, Any]:
    return {
        "containerStatuses": [
            {"name": "workload", "state": {"waiting": {"reason": reason, "message": "details"}}}
        ]
    }


def test_running_and_ready_pod_is_running_with_condition_times() -> None:
    seen = observe_pod(pod(), node_ok=True, now=NOW)
    assert seen.state == State.RUNNING
    assert seen.at[State.SCHEDULED] == datetime(2026, 1, 1, 11, 59, 50, tzinfo=UTC)
    assert seen.at[State.READY] == datetime(2026, 1, 1, 11, 59, 52, tzinfo=UTC)
    assert seen.at[State.RUNNING] == datetime(2026, 1, 1, 11, 59, 55, tzinfo=UTC)


def test_started_but_not_ready_is_ready() -> None:
    assert observe_pod(pod(ready=False), node_ok=True, now=NOW).state == State.READY


def test_unbound_pod_is_pending_with_the_schedulers_reason() -> None:
    unscheduled = {
        "metadata": {},
        "spec": {},
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/12 nodes are available: 12 Insufficient nvidia.com/gpu.",
                }
            ],
        },
    }
    seen = observe_pod(unscheduled, node_ok=True, now=NOW)
    assert seen.state == State.PENDING
    assert seen.unschedulable_message is not None
    assert "Insufficient nvidia.com/gpu" in seen.unschedulable_message


def test_pod_bound_directly_without_scheduler_condition_counts_as_scheduled() -> None:
    direct = {
        "metadata": {"creationTimestamp": "2026-01-01T11:59:49Z"},
        "spec": {"nodeName": "n"},
        "status": {"phase": "Pending"},
    }
    seen = observe_pod(direct, node_ok=True, now=NOW)
    assert seen.state == State.SCHEDULED
    assert seen.at[State.SCHEDULED] == datetime(2026, 1, 1, 11, 59, 49, tzinfo=UTC)


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        ("ErrImagePull", FailureReason.IMAGE_PULL_ERROR),
        ("ImagePullBackOff", FailureReason.IMAGE_PULL_ERROR),
        ("InvalidImageName", FailureReason.IMAGE_PULL_ERROR),
        ("CrashLoopBackOff", FailureReason.CRASH_LOOP),
    ],
)
def test_container_waiting_reasons_fail_the_instance(reason: str, expected: FailureReason) -> None:
    seen = observe_pod(pod(ready=False, **waiting(reason)), node_ok=True, now=NOW)
    assert (seen.state, seen.reason, seen.message) == (State.FAILED, expected, "details")


def test_a_lost_node_fails_a_bound_pod() -> None:
    seen = observe_pod(pod(), node_ok=False, now=NOW)
    assert (seen.state, seen.reason) == (State.FAILED, FailureReason.NODE_LOST)


def test_deleting_pod_is_stopping_and_finished_pod_is_stopped() -> None:
    deleting = pod()
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T12:00:00Z"
    assert observe_pod(deleting, node_ok=True, now=NOW).state == State.STOPPING
    assert observe_pod(pod("Succeeded"), node_ok=True, now=NOW).state == State.STOPPED


def test_path_fills_skipped_start_states_in_order() -> None:
    at = {state: NOW for state in State}
    at[State.SCHEDULED] = NOW - timedelta(seconds=5)
    at[State.READY] = NOW - timedelta(seconds=6)  # one-second condition precision
    steps = path(State.PENDING, State.RUNNING, at, not_before=NOW - timedelta(seconds=30))
    assert [step.state for step in steps] == [State.SCHEDULED, State.READY, State.RUNNING]
    assert [step.at for step in steps] == sorted(step.at for step in steps)


def test_no_step_precedes_the_admission_recorded_before_it() -> None:
    """Admitted (pending) at .323 s; the pod's conditions say the whole second before.
    The GPU-holding steps start at the admission, never before it."""
    pending_at = NOW + timedelta(microseconds=323_000)
    at = {state: NOW for state in State}
    steps = path(State.PENDING, State.RUNNING, at, not_before=pending_at)
    assert [(step.state, step.at) for step in steps] == [
        (State.SCHEDULED, pending_at),
        (State.READY, pending_at),
        (State.RUNNING, pending_at),
    ]
    later = NOW + timedelta(seconds=2)
    at[State.RUNNING] = later
    [step] = path(State.READY, State.RUNNING, at, not_before=pending_at)
    assert step.at == later  # a later Kubernetes time stands


def test_illegal_transitions_are_refused() -> None:
    at = {state: NOW for state in State}
    floor = NOW - timedelta(seconds=1)
    assert path(State.RUNNING, State.RUNNING, at, not_before=floor) == []
    assert path(State.RUNNING, State.STOPPING, at, not_before=floor) == [Step(State.STOPPING, NOW)]
    with pytest.raises(ValueError, match="illegal transition"):
        path(State.STOPPED, State.RUNNING, at, not_before=floor)
    with pytest.raises(ValueError, match="illegal transition"):
        path(State.FAILED, State.STOPPING, at, not_before=floor)
