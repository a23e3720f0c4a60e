"""Monitoring reads a workload's project from its lifecycle events (decision 142) under
the id its GPUs' telemetry names it by: the id the node agent reads from the pod's
labels (`naming.workload_of`), for every kind of work."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gpucloud_libs.naming import INSTANCE_LABEL, JOB_LABEL, SERVICE_LABEL, TENANT_LABEL, workload_of
from gpucloud_libs.workload_events import (
    InstanceStateChanged,
    JobRunStateChanged,
    ReplicaStateChanged,
)
from gpucloud_monitoring.workload_projects import telemetry_id

HELD: dict[str, Any] = {
    "tenant_id": "acme", "project": "vision", "spec_name": "h100-1", "gpu_type": "H100",
    "gpu_count": 1, "sequence": 1, "at": datetime(2026, 12, 7, tzinfo=UTC),
}  # fmt: skip


def test_each_kind_is_named_as_its_pods_telemetry_names_it() -> None:
    instance = InstanceStateChanged(instance_id="i-1", state="running", **HELD)
    run = JobRunStateChanged(job_id="train", run_id="r-1", state="running", **HELD)
    replica = ReplicaStateChanged(
        service_id="chat", replica_id="p-1", revision=1, state="running", **HELD
    )
    pods = [
        {TENANT_LABEL: "acme", INSTANCE_LABEL: "i-1"},
        {TENANT_LABEL: "acme", JOB_LABEL: "train"},
        {TENANT_LABEL: "acme", SERVICE_LABEL: "chat"},
    ]
    for event, labels in zip((instance, run, replica), pods, strict=True):
        assert workload_of(labels) == ("acme", telemetry_id(event))
