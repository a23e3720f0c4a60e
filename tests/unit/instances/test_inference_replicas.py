"""How the inference controller reads a replica's pod (inference/replicas.py): whether
the gateway may send it requests, which revision it runs, when it counts as
crash-looping, and how a replica's billing states map onto a run's."""

from __future__ import annotations

from typing import Any

import pytest

from gpucloud_instances import manifests
from gpucloud_instances.controller.cache import TrackedPod
from gpucloud_instances.inference.replicas import (
    CRASH_LOOP_RESTARTS,
    crash_looping,
    recorded_as_run,
    replica_state_of,
    replica_view,
    revision_of,
)
from gpucloud_instances.job_lifecycle import RunState


def replica_pod(
    *, phase: str = "Running", ready: str = "True", revision: str | None = "3", **metadata: Any
) -> dict[str, Any]:
    labels = {manifests.SERVICE: "chat"} | ({manifests.REVISION: revision} if revision else {})
    return {
        "metadata": {"name": "isvc-chat-7f9c4-bx2lq", "labels": labels, **metadata},
        "spec": {"nodeName": "l40s-a-1"},
        "status": {
            "phase": phase, "podIP": "10.1.4.7",
            "conditions": [{"type": "Ready", "status": ready}],
        },
    }  # fmt: skip


def test_a_running_ready_replica_is_served_at_its_pod_address() -> None:
    assert replica_view(replica_pod()) == {
        "name": "isvc-chat-7f9c4-bx2lq", "revision": 3, "node": "l40s-a-1",
        "address": "10.1.4.7", "ready": True, "terminating": False,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("phase", "ready"), [("Running", "False"), ("Pending", "True"), ("Failed", "True")]
)
def test_a_replica_is_ready_only_while_running_with_its_ready_condition(
    phase: str, ready: str
) -> None:
    assert replica_view(replica_pod(phase=phase, ready=ready))["ready"] is False


def test_a_deleted_replica_is_terminating_so_the_gateway_stops_sending_it_requests() -> None:
    leaving = replica_view(replica_pod(deletionTimestamp="2026-11-27T04:00:00Z"))
    assert (leaving["ready"], leaving["terminating"]) == (True, True)


def test_a_replica_without_a_revision_label_runs_none_yet_a_run_of_it_counts_as_the_first() -> None:
    unlabelled = replica_pod(revision=None)
    assert replica_view(unlabelled)["revision"] == 0
    assert revision_of(TrackedPod(unlabelled)) == 1
    assert revision_of(TrackedPod(replica_pod(revision="4"))) == 4


def crashing(reason: str, restarts: int) -> dict[str, Any]:
    pod = replica_pod(phase="Running", ready="False")
    pod["status"]["containerStatuses"] = [
        {"name": "workload", "restartCount": restarts, "state": {"waiting": {"reason": reason}}}
    ]
    return pod


def test_a_replica_crash_loops_once_it_has_restarted_enough_times() -> None:
    assert CRASH_LOOP_RESTARTS == 3
    assert not crash_looping(crashing("CrashLoopBackOff", 2))
    assert crash_looping(crashing("CrashLoopBackOff", 3))
    assert not crash_looping(crashing("ContainerCreating", 9))
    assert not crash_looping(replica_pod())


def test_a_replicas_billing_states_map_onto_a_runs_and_back() -> None:
    assert [recorded_as_run(state) for state in ("scheduled", "running", "ended")] == [
        RunState.SCHEDULED, RunState.RUNNING, RunState.FAILED,
    ]  # fmt: skip
    assert [replica_state_of(state) for state in RunState] == [
        "scheduled", "running", "ended", "ended",
    ]  # fmt: skip
