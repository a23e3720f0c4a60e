"""Monitoring's pure engines, fed samples: GPU tiers, node health, alert rules
(stop-when-idle among them) and the metric roll-ups."""

from __future__ import annotations

from datetime import timedelta

from gpucloud_libs.events import GpuSample
from gpucloud_monitoring.health import HealthTracker
from gpucloud_monitoring.rollup import Rollup
from gpucloud_monitoring.rules import Rule, RuleEngine
from gpucloud_monitoring.tiers import Capability, classify

from .samples import T0, sample


def test_tiers_follow_the_model_and_drop_for_a_degraded_link() -> None:
    assert classify(Capability("NVIDIA H100 80GB HBM3")).tier == "flagship"
    assert classify(Capability("NVIDIA L40S")).tier == "datacenter"
    assert classify(Capability("NVIDIA L4")).tier == "inference"
    narrow = classify(Capability("NVIDIA H100", pcie_width_current=4, pcie_width_max=16))
    assert narrow.tier == "datacenter"
    assert narrow.reasons == ("PCIe link x4 of x16",)
    assert classify(Capability("Mystery GPU")).tier == "unclassified"


def test_health_degrades_on_heat_quarantines_on_xid_and_waits_for_release() -> None:
    tracker = HealthTracker()
    assert tracker.observe("n", [sample(0, temperature_c=88)], T0) is None
    degraded = tracker.observe("n", [sample(31, temperature_c=88)], T0 + timedelta(seconds=31))
    assert degraded is not None
    assert degraded.health == "degraded"
    healthy_again = tracker.observe("n", [sample(200)], T0 + timedelta(seconds=200))
    assert healthy_again is not None
    assert healthy_again.health == "healthy"
    quarantined = tracker.observe("n", [sample(201, xid_errors=(79,))], T0 + timedelta(seconds=201))
    assert quarantined is not None
    assert quarantined.reasons == ("GPU 0: XID 79",)
    assert tracker.observe("n", [sample(500)], T0 + timedelta(seconds=500)) is None
    # Only an operator's release, made after the fault, brings it back.
    released = tracker.release("n", T0 + timedelta(seconds=600))
    assert released is not None
    assert released.health == "healthy"


def test_a_fault_of_a_mig_gpu_is_one_reason_however_many_slices_report_it() -> None:
    slices = [
        sample(0, gpu_uuid=f"MIG-{n}", parent_gpu_uuid="GPU-1", slice="1g.5gb", xid_errors=(79,))
        for n in range(7)
    ]
    quarantined = HealthTracker().observe("n", slices, T0)
    assert quarantined is not None
    assert quarantined.reasons == ("GPU 0: XID 79",)


def test_a_rule_fires_after_its_duration_and_resolves_once() -> None:
    engine = RuleEngine()
    engine.set_rules([Rule("r", "temperature_c", ">", 90, duration_s=3, severity="critical")])
    states = []
    for second, temperature in [(0, 95), (1, 95), (2, 95), (3, 95), (4, 95), (5, 60), (6, 60)]:
        states += [
            (second, t.state)
            for t in engine.observe("n", [sample(second, temperature_c=temperature)])
        ]
    assert states == [(3, "firing"), (5, "resolved")]


def test_a_stop_when_idle_rule_holds_only_while_every_gpu_of_the_instance_is_idle() -> None:
    engine = RuleEngine()
    engine.set_rules(
        [
            Rule(
                "idle",
                "utilization_gpu_pct",
                "<",
                5,
                duration_s=2,
                severity="info",
                tenant_id="a",
                action="stop_instance",
            )
        ]
    )

    def instance(second: float, *utilisations: float) -> list[GpuSample]:
        return [
            sample(
                second,
                gpu_uuid=f"GPU-{i}",
                index=i,
                utilization_gpu_pct=u,
                tenant_id="a",
                instance_id="i-1",
            )
            for i, u in enumerate(utilisations)
        ] + [  # another tenant's idle instance, which the rule does not watch
            sample(
                second, gpu_uuid="GPU-9", utilization_gpu_pct=0.0, tenant_id="b", instance_id="i-2"
            )
        ]

    fired = []
    # One GPU busy: the instance is not idle, however long the other one idles.
    for second in range(5):
        fired += engine.observe("n", instance(second, 0.0, 80.0))
    assert fired == []
    for second in range(5, 10):
        fired += engine.observe("n", instance(second, 0.0, 1.0))
    assert [(t.state, t.subject, t.instance_id, t.at) for t in fired] == [
        ("firing", "i-1", "i-1", T0 + timedelta(seconds=7))
    ]
    assert fired[0].value == 1.0  # the busiest GPU's


def test_rollups_close_a_window_per_gpu_and_user() -> None:
    rollup = Rollup(60)
    assert rollup.add("n", sample(0, tenant_id="a", instance_id="i")) == []
    assert rollup.add("n", sample(30, tenant_id="b", instance_id="j", temperature_c=70)) == []
    closed = rollup.add("n", sample(61))
    assert sorted((doc["tenant_id"], doc["temperature_c_max"]) for doc in closed) == [
        ("a", 50.0),
        ("b", 70.0),
    ]
