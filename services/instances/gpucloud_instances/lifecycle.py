"""The instance lifecycle: states, legal transitions, and what a pod's status means.

    queued ─► pending ─► scheduled ─► ready ─► running ─► stopping ─► stopped ─► deleted
      │          └──────────┴───────────┴─────────┴───────────┴──► failed(reason) ─► deleted
      └──► stopped
    stopped, failed ─► pending  (a start of the same instance: a new stay on a node)

`queued` is a start that asked to wait its turn (`"queue": true`) in the admission
queue it shares with batch jobs (docs/queue.md); it holds no quota and no GPU.

`ready` is seed 004's "started, readiness probe not passing yet"; `running` is
"the readiness probe passes, the user can reach it". Everything here is pure:
the controller feeds it observed Kubernetes state and persists what it returns.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from gpucloud_libs.clock import as_stored


class State(StrEnum):
    QUEUED = "queued"
    PENDING = "pending"
    SCHEDULED = "scheduled"
    READY = "ready"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FAILED = "failed"
    DELETED = "deleted"


class FailureReason(StrEnum):
    UNSCHEDULABLE = "unschedulable"  # no node of the spec's type could ever fit it
    INSUFFICIENT_GPUS = "insufficient_gpus"  # it fits the fleet, but no GPUs were free in time
    IMAGE_PULL_ERROR = "image_pull_error"
    CRASH_LOOP = "crash_loop"
    NODE_LOST = "node_lost"
    QUOTA_EXCEEDED = "quota_exceeded"
    POD_LOST = "pod_lost"  # the pod vanished without being asked to stop
    STORAGE_UNAVAILABLE = "storage_unavailable"  # a storage it names is gone or not ready
    CLUSTER_LOST = "cluster_lost"  # its cluster stopped answering for longer than the grace


#: States in which the instance's pod is bound to a node and holds its GPUs: billed.
GPU_HOLDING = frozenset({State.SCHEDULED, State.READY, State.RUNNING, State.STOPPING})
#: States that count against the tenant's instance and GPU quota.
ACTIVE = frozenset({State.PENDING, *GPU_HOLDING})
TERMINAL = frozenset({State.STOPPED, State.FAILED, State.DELETED})
#: States from which a stop (the user's, a suspension's, a budget's) has work to do.
LIVE = frozenset({State.QUEUED, *ACTIVE})
#: States a start takes an instance out of, with its record, spec and storages.
STARTABLE = frozenset({State.STOPPED, State.FAILED})

_START_PATH = (State.PENDING, State.SCHEDULED, State.READY, State.RUNNING)

ALLOWED: dict[State, frozenset[State]] = {
    State.QUEUED: frozenset({State.PENDING, State.STOPPED, State.FAILED}),
    State.PENDING: frozenset({State.SCHEDULED, State.STOPPING, State.STOPPED, State.FAILED}),
    State.SCHEDULED: frozenset({State.READY, State.STOPPING, State.FAILED}),
    State.READY: frozenset({State.RUNNING, State.STOPPING, State.FAILED}),
    State.RUNNING: frozenset({State.READY, State.STOPPING, State.FAILED}),
    State.STOPPING: frozenset({State.STOPPED, State.FAILED}),
    State.STOPPED: frozenset({State.PENDING, State.DELETED}),
    State.FAILED: frozenset({State.PENDING, State.DELETED}),
    State.DELETED: frozenset(),
}


@dataclass(frozen=True)
class Step:
    """One transition to persist and publish, at the millisecond the history keeps, so
    the instance's history and its bill read the same instant."""

    state: State
    at: datetime
    reason: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "at", as_stored(self.at))


def path(
    current: State, target: State, at: dict[State, datetime], *, not_before: datetime
) -> list[Step]:
    """The transitions from `current` to `target`, filling in skipped start states.

    A pod observed already Running after `pending` still passed through
    `scheduled` and `ready`; those steps are emitted with the pod's own
    condition timestamps so GPU-seconds start when the GPUs were bound.

    `not_before` is the instance's last recorded step (its admission, for a pod
    first seen bound). Kubernetes' times have one-second precision, rounded down:
    they may move a step later than that, never earlier, so the history never
    goes back and nothing is billed before the platform admitted the instance.
    """
    if target == current:
        return []
    if current in _START_PATH and target in _START_PATH:
        start, end = _START_PATH.index(current), _START_PATH.index(target)
        if end > start:
            steps = [Step(state, at[state]) for state in _START_PATH[start + 1 : end + 1]]
            return _monotonic(steps, not_before)
    if target not in ALLOWED[current]:
        raise ValueError(f"illegal transition {current} -> {target}")
    return _monotonic([Step(target, at[target])], not_before)


def _monotonic(steps: list[Step], not_before: datetime) -> list[Step]:
    """Each step at its own time or the one before it, whichever is later."""
    fixed: list[Step] = []
    for step in steps:
        at = max(step.at, fixed[-1].at if fixed else not_before)
        fixed.append(Step(step.state, at, step.reason))
    return fixed


@dataclass(frozen=True)
class Observation:
    """What Kubernetes says about an instance's pod."""

    state: State
    at: dict[State, datetime]
    reason: FailureReason | None = None
    message: str | None = None
    node: str | None = None
    unschedulable_message: str | None = None
    #: Where the gateway reaches the instance's ports (instance URLs).
    pod_ip: str | None = None


_IMAGE_PULL = {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}


def timestamp(value: Any, default: datetime) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, str):
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    return default


def observe_pod(pod: dict[str, Any], *, node_ok: bool, now: datetime) -> Observation:
    """Map a pod (as a JSON dict) and its node's health to a lifecycle state.

    `node_ok` is False when the pod's node no longer exists or is not Ready.
    """
    metadata, spec, status = pod.get("metadata", {}), pod.get("spec", {}), pod.get("status", {})
    node = spec.get("nodeName")
    conditions = {c["type"]: c for c in status.get("conditions") or []}
    at: dict[State, datetime] = {state: now for state in State}

    if metadata.get("deletionTimestamp"):
        return Observation(State.STOPPING, at, node=node)
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in _IMAGE_PULL:
            return Observation(
                State.FAILED, at, FailureReason.IMAGE_PULL_ERROR, waiting.get("message"), node
            )
        if waiting.get("reason") == "CrashLoopBackOff":
            return Observation(
                State.FAILED, at, FailureReason.CRASH_LOOP, waiting.get("message"), node
            )
    phase = status.get("phase")
    if phase == "Succeeded":
        return Observation(State.STOPPED, at, node=node)
    if phase == "Failed":
        reason = (
            FailureReason.NODE_LOST
            if status.get("reason") in {"NodeLost", "Evicted"}
            else FailureReason.CRASH_LOOP
        )
        return Observation(State.FAILED, at, reason, status.get("message"), node)
    if node and not node_ok:
        return Observation(State.FAILED, at, FailureReason.NODE_LOST, f"node {node} was lost", node)

    scheduled = conditions.get("PodScheduled", {})
    if not node:
        message = scheduled.get("message") if scheduled.get("reason") == "Unschedulable" else None
        return Observation(State.PENDING, at, unschedulable_message=message)
    # A pod bound directly (warm stock) has a node but no scheduler condition.
    at[State.SCHEDULED] = timestamp(
        scheduled.get("lastTransitionTime") or metadata.get("creationTimestamp"), now
    )
    if phase != "Running":
        return Observation(State.SCHEDULED, at, node=node)
    at[State.READY] = timestamp(status.get("startTime"), at[State.SCHEDULED])
    ready = conditions.get("Ready", {})
    pod_ip = status.get("podIP")
    if ready.get("status") != "True":
        return Observation(State.READY, at, node=node, pod_ip=pod_ip)
    at[State.RUNNING] = timestamp(ready.get("lastTransitionTime"), at[State.READY])
    return Observation(State.RUNNING, at, node=node, pod_ip=pod_ip)
