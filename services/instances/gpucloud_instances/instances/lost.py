"""An instance whose cluster is lost (decision 130): what becomes of it, decided
without the cluster, which cannot be asked."""

from __future__ import annotations

from gpucloud_libs.clock import aware, now

from ..documents import InstanceDoc
from ..lifecycle import TERMINAL, FailureReason, State, Step
from ..workloads.reconciler import ClusterLost


def lost_steps(doc: InstanceDoc, lost: ClusterLost, *, deleted: bool) -> list[Step]:
    """A live instance fails, billed up to the cluster's first silent look (not before its
    own last transition); an ended one asked to be deleted is; a queued one, which
    holds nothing there yet, waits."""
    state = State(doc["state"])
    if not doc.get("admitted") or state == State.QUEUED:
        return []
    if state in TERMINAL:
        return [Step(State.DELETED, now())] if deleted and state != State.DELETED else []
    at = max([lost.since, *(aware(step["at"]) for step in doc["history"][-1:])])
    return [Step(State.FAILED, at, FailureReason.CLUSTER_LOST.value)]
