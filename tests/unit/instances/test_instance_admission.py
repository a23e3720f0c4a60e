"""An admitted start as stored: its first transition and event, and how a replay of
the same request is recognised."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gpucloud_instances.admission import Placed
from gpucloud_instances.documents import TenantDoc
from gpucloud_instances.instances.admission import instance_document
from gpucloud_instances.instances.schemas import InstanceCreate
from gpucloud_instances.jobs.schemas import JobCreate
from gpucloud_instances.workloads.admitted import NewWorkload
from gpucloud_instances.workloads.replays import request_hash
from gpucloud_libs.identity import Identity

from .fixtures import a_spec

AT = datetime(2026, 11, 27, 4, 50, 0, 250000, tzinfo=UTC)
SPEC = a_spec(name="l40s", gpu_type="NVIDIA-L40S", created_at=AT)
TENANT: dict[str, Any] = {"_id": "acme", "namespace": "gpc-acme", "quota": {}}


def admitted(body: InstanceCreate) -> NewWorkload:
    return NewWorkload(
        key="acme/i-1", workload_id="i-1",
        identity=Identity(subject="u-1", role="tenant-user", tenant_id="acme", expires_at=0),
        tenant=TenantDoc(**TENANT),  # type: ignore[typeddict-item]
        spec=SPEC, zones=[], placed=Placed("local-2", "region-2"), storages=[],
        request_hash=request_hash(body, id_field="instance_id"), idempotency_key="k-1",
        project="default",
    )  # fmt: skip


def test_a_start_is_stored_pending_with_its_first_event_numbered_one() -> None:
    body = InstanceCreate.model_validate({"image": "jupyter/base-notebook", "specName": "l40s"})
    doc = instance_document(admitted(body), body, AT)
    assert (doc["state"], doc["sequence"], doc["has_outbox"]) == ("pending", 1, True)
    assert (doc["cluster"], doc["region"]) == ("local-2", "region-2")  # where it was placed
    assert doc["history"] == [{"state": "pending", "at": AT, "reason": None}]
    [event] = doc["outbox"]
    assert event["id"] == "acme/i-1#1"
    assert (doc["gpu_count"], doc["gpu_type"], doc["user_id"]) == (1, "NVIDIA-L40S", "u-1")


def test_a_queued_start_is_stored_queued_and_holds_nothing_yet() -> None:
    body = InstanceCreate.model_validate(
        {"image": "jupyter/base-notebook", "specName": "l40s", "queue": True, "priority": 5}
    )
    doc = instance_document(admitted(body), body, AT)
    assert (doc["state"], doc["priority"], doc["node"]) == ("queued", 5, None)


def test_a_replay_matches_on_the_request_not_on_the_workload_id() -> None:
    """Retrying with the same instanceID (or jobID) is the same request; changing
    anything else is another one, which the API refuses with a conflict."""

    def instance(**fields: str) -> str:
        body = {"image": "jupyter/base-notebook", "specName": "l40s", **fields}
        return request_hash(InstanceCreate.model_validate(body), id_field="instance_id")

    def job(**fields: str) -> str:
        body = {"image": "pytorch/pytorch", "specName": "l40s", **fields}
        return request_hash(JobCreate.model_validate(body), id_field="job_id")

    assert instance(instanceID="a") == instance(instanceID="b") == instance()
    assert instance() != instance(zone="zone-a")
    assert job(jobID="a") == job(jobID="b") == job()
    assert job() != job(zone="zone-a")
