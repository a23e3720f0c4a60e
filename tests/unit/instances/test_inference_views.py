"""An inference service as the API shows it: its state, read from its replicas and
configurations, and every replica it ran, in the order a bill is checked."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gpucloud_instances.documents import (
    ReplicaRunDoc,
    ServiceConfigDoc,
    ServiceDoc,
    ServiceReplicaDoc,
)
from gpucloud_instances.inference.configurations import claimed_gpus
from gpucloud_instances.inference.views import replica_runs_view, service_state
from gpucloud_libs.gpu_shares import GpuShare

T0 = datetime(2026, 11, 27, 4, 0, tzinfo=UTC)


def config(revision: int = 2, *, min_replicas: int = 2, max_replicas: int = 4) -> ServiceConfigDoc:
    doc: dict[str, Any] = {
        "_id": "acme/chat@3", "key": "acme/chat", "generation": 3, "revision": revision,
        "min_replicas": min_replicas, "max_replicas": max_replicas, "max_surge": 1,
        "max_unavailable": 0, "autoscaling": None, "rolled_back_from": None,
    }  # fmt: skip
    return doc  # type: ignore[return-value]


def replica(revision: int, *, ready: bool = True, terminating: bool = False) -> ServiceReplicaDoc:
    return ServiceReplicaDoc(
        name=f"r{revision}", revision=revision, node="n1", address=None, ready=ready,
        terminating=terminating,
    )  # fmt: skip


def service(replicas: list[ServiceReplicaDoc], applied_revision: int = 2) -> ServiceDoc:
    doc: dict[str, Any] = {"replicas": replicas, "applied_revision": applied_revision}
    return doc  # type: ignore[return-value]


@pytest.mark.parametrize(
    ("replicas", "applied", "desired", "updated", "deleting", "state"),
    [
        ([replica(2), replica(2)], 2, 2, 2, True, "deleting"),
        ([replica(1), replica(2)], 2, 2, 1, False, "updating"),  # an old revision still runs
        ([], 1, 2, 0, False, "updating"),  # the Deployment is not at revision 2 yet
        ([], 2, 0, 0, False, "idle"),  # scaled to zero
        ([replica(2), replica(2)], 2, 2, 2, False, "ready"),
        ([replica(2), replica(2, ready=False)], 2, 2, 1, False, "deploying"),
        ([replica(2)], 2, 0, 1, False, "ready"),  # at zero wanted, one still serving
    ],
)
def test_a_services_state_is_read_from_its_replicas_and_revisions(
    replicas: list[ServiceReplicaDoc], applied: int, desired: int, updated: int,
    deleting: bool, state: str,
) -> None:  # fmt: skip
    doc = service(replicas, applied_revision=applied)
    assert service_state(doc, config(), desired, updated, deleting=deleting) == state


def test_a_service_claims_its_most_replicas_and_the_surge() -> None:
    assert claimed_gpus(config(max_replicas=4), GpuShare("nvidia.com/gpu"), 2) == 10


def run(scheduled: datetime | None, ended: datetime | None = None) -> ReplicaRunDoc:
    return ReplicaRunDoc(
        state="ended" if ended else "running", sequence=2, revision=1, node="n1",
        zone="zone-a", scheduled_at=scheduled, ended_at=ended,
    )  # fmt: skip


def test_every_replica_of_every_use_of_the_name_is_listed_oldest_first() -> None:
    """A deleted earlier use of the name keeps its replicas (flagged deleted), so its
    bill stays checkable; never-scheduled replicas come last."""
    earlier: dict[str, Any] = {
        "spec_name": "h100x1", "gpu_count": 1, "created_at": T0,
        "runs": {"old": run(T0 + timedelta(seconds=5), T0 + timedelta(minutes=3))},
    }  # fmt: skip
    live: dict[str, Any] = {
        "spec_name": "h100x2", "gpu_count": 2, "created_at": T0 + timedelta(hours=1),
        "runs": {
            "waiting": run(None),
            "b": run(T0 + timedelta(hours=1, seconds=9)),
            "a": run(T0 + timedelta(hours=1, seconds=9)),
        },
    }  # fmt: skip
    page = replica_runs_view([(live, False), (earlier, True)])  # type: ignore[list-item]
    assert [(r.replica_id, r.deleted, r.gpu_count) for r in page.items] == [
        ("old", True, 1), ("a", False, 2), ("b", False, 2), ("waiting", False, 2),
    ]  # fmt: skip
    assert page.items[0].ended_at == T0 + timedelta(minutes=3)
    assert page.items[-1].scheduled_at is None
