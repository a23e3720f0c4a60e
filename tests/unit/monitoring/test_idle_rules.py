"""Stop-when-idle watches instances: a batch job's run or a service's replica holds GPUs
in telemetry too (`job--…`, `svc--…`), but no such rule stops one."""

from __future__ import annotations

from datetime import UTC, datetime

from gpucloud_agent.simulated import Placement, SimulatedFleet
from gpucloud_monitoring.rules import Rule, RuleEngine


def test_an_idle_rule_fires_for_an_instance_and_never_for_a_job_or_a_replica() -> None:
    fleet = SimulatedFleet(seed=1)
    fleet.set_node("n1", "NVIDIA-H100-80GB-HBM3", 3)
    fleet.place("n1", [Placement("t-1", "i-nb", 1), Placement("t-1", "job--train", 1),
                       Placement("t-1", "svc--chat/abcde", 1)])  # fmt: skip
    engine = RuleEngine()
    engine.set_rules([Rule("idle", "utilization_gpu_pct", "<", 101, 0, "warning",
                           tenant_id="t-1", action="stop_instance")])  # fmt: skip
    fired = engine.observe("n1", fleet.sample("n1", datetime.now(UTC)))
    assert [(t.state, t.instance_id) for t in fired] == [("firing", "i-nb")]
