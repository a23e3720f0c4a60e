"""An inference service whose cluster is lost (decision 130): its replicas' runs,
ended without the cluster, which cannot be asked."""

from __future__ import annotations

from gpucloud_libs.clock import aware
from gpucloud_libs.outbox import OutboxEntry

from ..documents import ReplicaRunDoc, ServiceDoc
from ..transitions import replica_event
from ..workloads.reconciler import ClusterLost


def ended_with_cluster(
    doc: ServiceDoc, lost: ClusterLost
) -> tuple[dict[str, ReplicaRunDoc], list[OutboxEntry]]:
    """Every replica run not ended yet, ended at the cluster's first silent look (or at its
    scheduling, where that is later): the runs after, and their events."""
    runs = {rid: ReplicaRunDoc(**run) for rid, run in doc["runs"].items()}
    events: list[OutboxEntry] = []
    for rid, run in runs.items():
        if run["state"] == "ended":
            continue
        scheduled = [aware(run["scheduled_at"])] if run["scheduled_at"] else []
        at = max([lost.since, *scheduled])
        events.append(replica_event(doc, rid, run, "ended", at))
        runs[rid] = {**run, "state": "ended", "sequence": run["sequence"] + 1, "ended_at": at}
    return runs, events
