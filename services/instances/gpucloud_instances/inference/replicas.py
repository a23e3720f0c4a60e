"""What a replica's pod says, as the inference reconciler reads it: its state as a
run's, its revision, its view in the API, and whether it is crash-looping."""

from __future__ import annotations

from gpucloud_libs.events import ReplicaState
from gpucloud_libs.kube import Manifest

from .. import manifests
from ..controller.cache import TrackedPod
from ..documents import ServiceReplicaDoc
from ..job_lifecycle import RUN_ENDED, RunState

#: Restarts after which a replica in CrashLoopBackOff is started afresh, possibly on
#: another node, instead of being restarted in place.
CRASH_LOOP_RESTARTS = 3


def recorded_as_run(state: str) -> RunState:
    """A replica's recorded state as a run's, for `run_steps`."""
    return RunState.FAILED if state == "ended" else RunState(state)


def replica_state_of(state: RunState) -> ReplicaState:
    if state in RUN_ENDED:
        return "ended"
    return "running" if state == RunState.RUNNING else "scheduled"


def revision_of(tracked: TrackedPod) -> int:
    labels = tracked.pod["metadata"].get("labels", {})
    return max(1, int(labels.get(manifests.REVISION, "1")))


def replica_view(pod: Manifest) -> ServiceReplicaDoc:
    status = pod.get("status", {})
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    labels = pod["metadata"].get("labels", {})
    return {
        "name": pod["metadata"]["name"],
        "revision": int(labels.get(manifests.REVISION, "0")),
        "node": pod.get("spec", {}).get("nodeName"),
        "address": status.get("podIP"),
        "ready": status.get("phase") == "Running" and conditions.get("Ready") == "True",
        "terminating": bool(pod["metadata"].get("deletionTimestamp")),
    }


def crash_looping(pod: Manifest) -> bool:
    for container in pod.get("status", {}).get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting") or {}
        if (
            waiting.get("reason") == "CrashLoopBackOff"
            and container.get("restartCount", 0) >= CRASH_LOOP_RESTARTS
        ):
            return True
    return False
