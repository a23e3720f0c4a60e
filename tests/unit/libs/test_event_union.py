"""The event union (gpucloud_libs.events) and the topics that carry it
(gpucloud_libs.topics): every kind comes off Kafka as itself, keyed by the aggregate
whose order it keeps; fields outside a contract are refused; and each topic takes
only the kinds that belong on it."""

from __future__ import annotations

import typing
import uuid
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from gpucloud_libs.events import (
    AlertStateChanged,
    AuditRecorded,
    BudgetThresholdCrossed,
    CloudEvent,
    ClusterNodes,
    Event,
    EventData,
    GpuSample,
    InferenceServiceDeleted,
    InstanceStateChanged,
    JobRunStateChanged,
    JobStateChanged,
    MalformedEvent,
    NodeHealthChanged,
    NodeInventory,
    NodeQuarantineRequested,
    NodeReleaseRequested,
    ProjectBudgetReached,
    ReplicaStateChanged,
    StopTenantInstancesRequested,
    StorageUsageSampled,
    TelemetryBatch,
    TenantDeleted,
    TenantQuota,
    TenantUpserted,
    UsageRecorded,
    UserAccessEnded,
    UserSpendLimitReached,
)
from gpucloud_libs.topics import (
    ALL_TOPICS,
    BILLING_ALERTS,
    INFERENCE_LIFECYCLE,
    JOB_LIFECYCLE,
    TELEMETRY,
    TENANTS,
    TopicSpec,
    dead_letter_topic,
)

AT = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
HELD = {"tenant_id": "t-1", "spec_name": "h100x1", "gpu_type": "H100", "gpu_count": 1,
        "sequence": 2, "at": AT}  # fmt: skip
QUOTA = TenantQuota(max_gpus=8, max_instances=4, max_storage_bytes=10**12)
SAMPLE = GpuSample(
    gpu_uuid="GPU-0", index=0, at=AT, utilization_gpu_pct=50, utilization_memory_pct=10,
    memory_used_mib=1024, memory_total_mib=81559, temperature_c=40, power_w=300,
)  # fmt: skip

#: One of each kind in the union, with the Kafka key it orders by.
EVERY_KIND: list[tuple[EventData, str]] = [
    (TenantUpserted(tenant_id="t-1", name="Acme", status="active", quota=QUOTA), "t-1"),
    (TenantDeleted(tenant_id="t-1"), "t-1"),
    (UserAccessEnded(tenant_id="t-1", user_id="u-1"), "t-1"),
    (InstanceStateChanged(instance_id="nb-1", state="running", **HELD), "t-1/nb-1"),
    (StopTenantInstancesRequested(tenant_id="t-1", reason="budget"), "t-1"),
    (UserSpendLimitReached(tenant_id="t-1", user_id="u-1", period="2026-11", limit_cents=500,
                           spent_cents=501), "t-1"),
    (ProjectBudgetReached(tenant_id="t-1", project="vision", period="2026-11", limit_cents=500,
                          spent_cents=501), "t-1"),
    (StorageUsageSampled(storage_id="s-1", tenant_id="t-1", kind="object", bytes_used=5, at=AT),
     "s-1"),
    (TelemetryBatch(node="n1", source="nvml", samples=(SAMPLE,)), "n1"),
    (NodeInventory(node="n1", source="simulated", at=AT), "n1"),
    (ClusterNodes(cluster="local-2", nodes=("b200-zone-c-0",), at=AT), "local-2"),
    (NodeReleaseRequested(node="n1", requested_by="ops", at=AT), "n1"),
    (NodeQuarantineRequested(node="n1", requested_by="ops", reason="xid 79", at=AT), "n1"),
    (NodeHealthChanged(node="n1", health="quarantined", at=AT), "n1"),
    (AlertStateChanged(alert_id="a-1", rule_id="r-1", state="firing", severity="warning",
                       subject="GPU-0", metric="temperature_c", value=90, threshold=85, at=AT),
     "a-1"),
    (JobStateChanged(job_id="train", tenant_id="t-1", spec_name="h100x1", state="queued",
                     sequence=1, at=AT), "t-1/train"),
    (JobRunStateChanged(job_id="train", run_id="x7k2p", state="running", **HELD), "t-1/train"),
    (ReplicaStateChanged(service_id="chat", replica_id="abc12", revision=1, state="running",
                         **HELD), "t-1/chat"),
    (InferenceServiceDeleted(service_id="chat", tenant_id="t-1", at=AT), "t-1/chat"),
    (UsageRecorded(usage_id="u-1", tenant_id="t-1", subject_id="nb-1", meter="gpu_seconds",
                   quantity=3600, start=AT, end=AT), "t-1"),
    (BudgetThresholdCrossed(tenant_id="t-1", period="2026-03", threshold_pct=80, spent_cents=8,
                            budget_cents=10), "t-1"),
    (AuditRecorded(audit_id="au-1", tenant_id=None, actor="admin", action="POST /v1/tenants",
                   resource="/v1/tenants", result=201, at=AT), "platform"),
]  # fmt: skip


def test_every_kind_in_the_union_has_a_sample_here() -> None:
    """A kind added to the union without a sample here fails this, not silently."""
    [members, _] = typing.get_args(Event)
    union_types = {member.model_fields["type"].default for member in typing.get_args(members)}
    assert {data.type for data, _ in EVERY_KIND} == union_types
    assert len(EVERY_KIND) == len(union_types)
    assert all(t.startswith("io.gpucloud.") and t.endswith(".v1") for t in union_types)


@pytest.mark.parametrize(("data", "key"), EVERY_KIND, ids=[d.type for d, _ in EVERY_KIND])
def test_each_kind_comes_off_kafka_as_itself_keyed_by_its_aggregate(
    data: EventData, key: str
) -> None:
    event = CloudEvent.new(data, source="/tests")
    kafka_key, value, headers = event.to_kafka()
    assert kafka_key == key.encode()
    assert (headers["ce_subject"], headers["ce_type"]) == (key, data.type)
    decoded = CloudEvent.from_kafka(value, headers)
    assert type(decoded.data) is type(data)
    assert decoded.data == data
    assert (decoded.id, decoded.source, decoded.time) == (event.id, "/tests", event.time)


def test_times_keep_their_microseconds_over_kafka() -> None:
    _, value, headers = CloudEvent.new(NodeHealthChanged(node="n1", health="healthy", at=AT),
                                       source="/x").to_kafka()  # fmt: skip
    decoded = CloudEvent.from_kafka(value, headers).data
    assert isinstance(decoded, NodeHealthChanged)
    assert decoded.at == AT
    assert decoded.at.microsecond == 123456


def test_an_event_keeps_the_id_it_is_given_and_otherwise_gets_a_fresh_one() -> None:
    data = TenantDeleted(tenant_id="t-1")
    assert CloudEvent.new(data, source="/x", event_id="t-1:2026-03:80").id == "t-1:2026-03:80"
    first, second = CloudEvent.new(data, source="/x"), CloudEvent.new(data, source="/x")
    assert first.id != second.id
    assert uuid.UUID(first.id).version == 4


def test_headers_missing_together_are_named_together() -> None:
    _, value, headers = CloudEvent.new(TenantDeleted(tenant_id="t"), source="/x").to_kafka()
    del headers["ce_source"], headers["ce_time"]
    with pytest.raises(MalformedEvent, match="missing CloudEvents headers: ce_source, ce_time"):
        CloudEvent.from_kafka(value, headers)


def test_a_time_without_a_zone_is_malformed() -> None:
    value = b'{"type": "io.gpucloud.node.health_changed.v1", "node": "n1", "health": "healthy", "at": "2026-03-01T12:00:00"}'
    _, _, headers = CloudEvent.new(NodeHealthChanged(node="n1", health="healthy", at=AT),
                                   source="/x").to_kafka()  # fmt: skip
    with pytest.raises(MalformedEvent, match="invalid payload"):
        CloudEvent.from_kafka(value, headers)


def test_events_cannot_be_changed_once_made() -> None:
    event = TenantDeleted(tenant_id="t-1")
    with pytest.raises(ValidationError):
        event.tenant_id = "t-2"  # type: ignore[misc]


# --- contracts -------------------------------------------------------------------


@pytest.mark.parametrize("weight", ["1", "1/7", "3/7", "1/4", "9999/9999"])
def test_a_gpu_weight_is_an_exact_fraction(weight: str) -> None:
    event = InstanceStateChanged(instance_id="i", state="running", gpu_weight=weight, **HELD)
    assert event.gpu_weight == weight


@pytest.mark.parametrize("weight", ["0", "0/7", "1/0", "01", "1.5", "-1", "1/", "10000", "1/7 "])
def test_a_gpu_weight_that_is_no_positive_fraction_is_refused(weight: str) -> None:
    with pytest.raises(ValidationError):
        InstanceStateChanged(instance_id="i", state="running", gpu_weight=weight, **HELD)


def test_a_transition_holds_whole_gpus_unless_it_says_otherwise() -> None:
    event = InstanceStateChanged(instance_id="i", state="running", **HELD)
    assert (event.gpu_resource, event.gpu_weight) == ("nvidia.com/gpu", "1")
    assert (event.of_job, event.of_service) == (None, None)


@pytest.mark.parametrize(
    "bad",
    [{"gpu_count": -1}, {"sequence": -1}, {"state": "exploded"}, {"at": datetime(2026, 3, 1)}],
    ids=["negative-gpus", "negative-sequence", "unknown-state", "naive-time"],
)
def test_a_transition_outside_its_contract_is_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        InstanceStateChanged.model_validate({"instance_id": "i", "state": "running", **HELD, **bad})


def test_each_kind_has_only_its_own_states() -> None:
    with pytest.raises(ValidationError):
        JobRunStateChanged(job_id="j", run_id="r", state="stopping", **HELD)
    with pytest.raises(ValidationError):
        ReplicaStateChanged(service_id="s", replica_id="r", revision=1, state="stopped", **HELD)
    with pytest.raises(ValidationError):  # revisions count from 1
        ReplicaStateChanged(service_id="s", replica_id="r", revision=0, state="running", **HELD)


def test_a_telemetry_batch_holds_at_least_one_sample() -> None:
    with pytest.raises(ValidationError):
        TelemetryBatch(node="n1", source="nvml", samples=())


def test_a_quota_is_never_negative_and_its_cap_is_optional() -> None:
    assert QUOTA.monthly_spend_cap_cents is None
    assert QUOTA.borrow_gpus == 0
    with pytest.raises(ValidationError):
        TenantQuota(max_gpus=-1, max_instances=0, max_storage_bytes=0)
    with pytest.raises(ValidationError):
        TenantUpserted(tenant_id="t", name="n", status="active", quota=QUOTA, queue_weight=0)


def test_audit_entries_of_a_tenant_keep_that_tenants_order() -> None:
    entry = AuditRecorded(audit_id="a", tenant_id="t-1", actor="u", action="x", resource="/",
                          result=200, at=AT)  # fmt: skip
    assert entry.aggregate_id == "t-1"


# --- topics ----------------------------------------------------------------------


def test_a_topic_takes_only_the_kinds_that_belong_on_it() -> None:
    assert TENANTS.belongs(TenantDeleted(tenant_id="t"))
    assert not TENANTS.belongs(StopTenantInstancesRequested(tenant_id="t", reason="x"))
    assert JOB_LIFECYCLE.belongs(
        JobRunStateChanged(job_id="j", run_id="r", state="running", **HELD)
    )
    assert not JOB_LIFECYCLE.belongs(InstanceStateChanged(instance_id="i", state="running", **HELD))
    assert INFERENCE_LIFECYCLE.belongs(
        InferenceServiceDeleted(service_id="s", tenant_id="t", at=AT)
    )
    assert TELEMETRY.belongs(NodeReleaseRequested(node="n1", requested_by="ops", at=AT))
    assert not BILLING_ALERTS.belongs(TenantDeleted(tenant_id="t"))


def test_a_topic_that_names_no_kinds_takes_any() -> None:
    assert TopicSpec("free").belongs(TenantDeleted(tenant_id="t"))


def test_every_kind_belongs_on_exactly_one_platform_topic() -> None:
    for data, _ in EVERY_KIND:
        homes = [topic.name for topic in ALL_TOPICS if topic.carries and topic.belongs(data)]
        assert len(homes) == 1, (data.type, homes)


def test_billing_inputs_are_kept_forever_and_telemetry_for_a_day() -> None:
    kept = {topic.name for topic in ALL_TOPICS if topic.retention_ms == -1}
    assert {"gpucloud.instances.lifecycle.v1", "gpucloud.jobs.lifecycle.v1",
            "gpucloud.inference.lifecycle.v1", "gpucloud.storage.usage.v1",
            "gpucloud.nodes.health.v1", "gpucloud.usage.v1"} <= kept  # fmt: skip
    assert TELEMETRY.retention_ms == 24 * 3600 * 1000
    assert len({topic.name for topic in ALL_TOPICS}) == len(ALL_TOPICS)


def test_a_consumer_groups_dead_letters_are_kept_forever_in_one_partition() -> None:
    topic = dead_letter_topic("gpucloud-metering")
    assert (topic.name, topic.partitions, topic.retention_ms) == (
        "gpucloud.dlq.gpucloud-metering",
        1,
        -1,
    )
