"""Each node's seal on its telemetry survives the trip over Kafka and binds the report
to its node and its content (gpucloud_libs.node_seals)."""

from __future__ import annotations

from datetime import UTC, datetime

from gpucloud_libs.events import CloudEvent, GpuInventory, GpuSample, NodeInventory, TelemetryBatch
from gpucloud_libs.node_seals import ReportT, genuine, node_key, seal
from gpucloud_monitoring.node_keys import NodeSeals

SECRET = "a-telemetry-secret-of-the-monitoring-service-0123456789"
SAMPLE = GpuSample(
    gpu_uuid="GPU-0", index=0, at=datetime(2026, 11, 27, 10, 0, 0, 123456, tzinfo=UTC),
    utilization_gpu_pct=33.333333333333336, utilization_memory_pct=0.1, memory_used_mib=1e-7,
    memory_total_mib=81559, temperature_c=40, power_w=70.25, tenant_id="t-a", instance_id="i-1",
)  # fmt: skip


def _over_kafka(report: ReportT) -> ReportT:
    _, value, headers = CloudEvent.new(report, source="/tests").to_kafka()
    data = CloudEvent.from_kafka(value, headers).data
    assert isinstance(data, type(report))
    return data


def test_a_sealed_report_is_genuine_after_kafka_under_its_nodes_key_alone() -> None:
    batch = seal(
        node_key(SECRET, "n1"), TelemetryBatch(node="n1", source="nvml", samples=(SAMPLE,))
    )
    inventory = seal(node_key(SECRET, "n1"), NodeInventory(
        node="n1", source="nvml", at=SAMPLE.at,
        gpus=(GpuInventory(gpu_uuid="GPU-0", index=0, name="H100", memory_total_mib=81559),),
    ))  # fmt: skip
    for report in (batch, inventory):
        received = _over_kafka(report)
        assert genuine(node_key(SECRET, "n1"), received)
        assert not genuine(node_key(SECRET, "n2"), received)
        assert not genuine(node_key("another-secret-entirely-0123456789abcdef", "n1"), received)


def test_a_report_changed_renamed_or_unsealed_is_not_genuine() -> None:
    key = node_key(SECRET, "n1")
    batch = seal(key, TelemetryBatch(node="n1", source="nvml", samples=(SAMPLE,)))
    idle = SAMPLE.model_copy(update={"utilization_gpu_pct": 0.0})
    assert not genuine(key, batch.model_copy(update={"samples": (idle,)}))
    # Sealed by n1, said to be n2's: n2's key does not open it.
    assert not genuine(node_key(SECRET, "n2"), batch.model_copy(update={"node": "n2"}))
    assert not genuine(key, batch.model_copy(update={"mac": ""}))


def test_monitoring_takes_only_the_reports_sealed_by_the_node_they_name() -> None:
    seals = NodeSeals(SECRET)
    honest = seal(
        node_key(SECRET, "n1"), TelemetryBatch(node="n1", source="nvml", samples=(SAMPLE,))
    )
    forged = seal(
        node_key(SECRET, "n1"), TelemetryBatch(node="n2", source="nvml", samples=(SAMPLE,))
    )
    unsealed = TelemetryBatch(node="n3", source="nvml", samples=(SAMPLE,))
    assert seals.genuine([honest, forged, unsealed]) == [honest]
    assert seals.refused == 2
