"""The alert rule engine fed by hand-made samples: the comparisons at their thresholds,
which GPUs a rule watches (its node, its tenant), one alert per episode with an id a
replay finds again, restored alerts, and rule sets replaced while alerts are open."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from gpucloud_libs.events import GpuSample
from gpucloud_monitoring.rules import (
    AlertTransition,
    Rule,
    RuleEngine,
    alert_id,
    holds,
    metric_value,
)

from .samples import T0, sample


def hot_rule(**fields: Any) -> Rule:
    """Temperature above 90 °C for 2 s, fleet-wide unless `fields` say otherwise."""
    values: dict[str, Any] = {
        "rule_id": "hot", "metric": "temperature_c", "comparison": ">", "threshold": 90,
        "duration_s": 2, "severity": "critical",
    }  # fmt: skip
    values.update(fields)
    return Rule(**values)


def engine_of(*rules: Rule) -> RuleEngine:
    engine = RuleEngine()
    engine.set_rules(list(rules))
    return engine


def feed(
    engine: RuleEngine, batches: list[list[GpuSample]], node: str = "n1"
) -> list[AlertTransition]:
    return [t for batch in batches for t in engine.observe(node, batch)]


@pytest.mark.parametrize(
    ("value", "comparison", "threshold", "expected"),
    [
        (90.0, ">", 90.0, False),
        (90.01, ">", 90.0, True),
        (90.0, ">=", 90.0, True),
        (89.99, ">=", 90.0, False),
        (5.0, "<", 5.0, False),
        (4.99, "<", 5.0, True),
        (5.0, "<=", 5.0, True),
        (5.01, "<=", 5.0, False),
    ],
)
def test_each_comparison_is_exact_at_its_threshold(
    value: float, comparison: str, threshold: float, expected: bool
) -> None:

    assert holds(value, comparison, threshold) is expected


def test_a_metric_reads_as_a_number_and_xids_as_their_count() -> None:
    reading = sample(0, ecc_corrected=3, xid_errors=(13, 79, 79), sm_clock_mhz=None)
    assert metric_value(reading, "ecc_corrected") == 3.0
    assert metric_value(reading, "xid_count") == 3.0
    assert metric_value(reading, "temperature_c") == 50.0
    assert metric_value(reading, "sm_clock_mhz") is None
    assert metric_value(sample(0), "xid_count") == 0.0


def test_a_gpu_that_does_not_report_the_metric_is_never_watched() -> None:
    engine = engine_of(hot_rule(metric="sm_clock_mhz", comparison="<", threshold=100, duration_s=0))
    assert feed(engine, [[sample(s)] for s in range(5)]) == []
    # Once it reports a clock below the threshold, it fires at once (no duration).
    fired = engine.observe("n1", [sample(5, sm_clock_mhz=50.0)])
    assert [(t.state, t.value) for t in fired] == [("firing", 50.0)]


def test_a_rule_without_duration_fires_on_the_first_sample_that_holds() -> None:
    engine = engine_of(hot_rule(duration_s=0))
    assert [t.at for t in engine.observe("n1", [sample(7, temperature_c=91)])] == [
        T0 + timedelta(seconds=7)
    ]


def test_a_break_in_the_condition_starts_the_duration_again() -> None:
    engine = engine_of(hot_rule(duration_s=2))
    temperatures = [95, 95, 60, 95, 95, 95]
    fired = feed(engine, [[sample(s, temperature_c=t)] for s, t in enumerate(temperatures)])
    # Held 0-1, broken at 2, held again from 3: two seconds later is 5.
    assert [(t.state, t.at) for t in fired] == [("firing", T0 + timedelta(seconds=5))]


def test_each_gpu_is_its_own_subject() -> None:
    engine = engine_of(hot_rule(duration_s=0))
    batch = [
        sample(0, gpu_uuid="GPU-1", index=0, temperature_c=95),
        sample(0, gpu_uuid="GPU-2", index=1, temperature_c=50),
        sample(0, gpu_uuid="GPU-3", index=2, temperature_c=99),
    ]
    fired = engine.observe("n1", batch)
    assert [(t.subject, t.value) for t in fired] == [("GPU-1", 95.0), ("GPU-3", 99.0)]
    # GPU-1 cools: only its alert resolves, GPU-3's stays open.
    cooled = engine.observe(
        "n1",
        [
            sample(1, gpu_uuid="GPU-1", index=0, temperature_c=40),
            sample(1, gpu_uuid="GPU-3", index=2, temperature_c=99),
        ],
    )
    assert [(t.state, t.subject) for t in cooled] == [("resolved", "GPU-1")]
    assert cooled[0].alert_id == fired[0].alert_id


def test_a_node_rule_watches_its_node_alone() -> None:
    engine = engine_of(hot_rule(duration_s=0, node="n2"))
    assert engine.observe("n1", [sample(0, temperature_c=99)]) == []
    fired = engine.observe("n2", [sample(0, temperature_c=99)])
    assert [(t.node, t.state) for t in fired] == [("n2", "firing")]


def test_a_tenant_rule_sees_only_the_gpus_of_that_tenants_instances() -> None:
    engine = engine_of(
        hot_rule(rule_id="theirs", duration_s=0, tenant_id="a"),
        hot_rule(rule_id="fleet", duration_s=0),
    )
    batch = [
        sample(0, gpu_uuid="GPU-a", temperature_c=99, tenant_id="a", instance_id="i-a"),
        sample(0, gpu_uuid="GPU-b", temperature_c=99, tenant_id="b", instance_id="i-b"),
        sample(0, gpu_uuid="GPU-idle", temperature_c=99),
    ]
    fired = {(t.rule.rule_id, t.subject) for t in engine.observe("n1", batch)}
    assert fired == {
        ("theirs", "GPU-a"),
        ("fleet", "GPU-a"),
        ("fleet", "GPU-b"),
        ("fleet", "GPU-idle"),
    }


def test_a_transition_says_whose_instance_the_gpu_ran_and_the_value_seen() -> None:
    engine = engine_of(hot_rule(duration_s=0))
    (firing,) = engine.observe(
        "n7", [sample(3, temperature_c=93.5, tenant_id="a", instance_id="nb-1")]
    )
    assert (firing.node, firing.tenant_id, firing.instance_id, firing.value) == (
        "n7",
        "a",
        "nb-1",
        93.5,
    )
    (resolved,) = engine.observe(
        "n7", [sample(4, temperature_c=70, tenant_id="a", instance_id="nb-1")]
    )
    assert (resolved.state, resolved.value, resolved.at) == (
        "resolved",
        70.0,
        T0 + timedelta(seconds=4),
    )


def test_an_alert_id_names_the_rule_the_subject_and_when_the_episode_began() -> None:
    engine = engine_of(hot_rule(duration_s=2))
    fired = feed(engine, [[sample(s, temperature_c=95)] for s in range(3)])
    assert [t.alert_id for t in fired] == [alert_id("hot", "GPU-1", T0)]
    assert fired[0].alert_id.startswith("al-")
    assert len(fired[0].alert_id) == len("al-") + 20
    # The same batches replayed to a fresh engine find the same alert.
    replayed = feed(
        engine_of(hot_rule(duration_s=2)), [[sample(s, temperature_c=95)] for s in range(3)]
    )
    assert [t.alert_id for t in replayed] == [fired[0].alert_id]


def test_a_second_episode_is_a_new_alert() -> None:
    engine = engine_of(hot_rule(duration_s=0))
    temperatures = [95, 60, 95]
    transitions = feed(engine, [[sample(s, temperature_c=t)] for s, t in enumerate(temperatures)])
    assert [t.state for t in transitions] == ["firing", "resolved", "firing"]
    assert transitions[0].alert_id == transitions[1].alert_id
    assert transitions[2].alert_id != transitions[0].alert_id
    assert transitions[2].alert_id == alert_id("hot", "GPU-1", T0 + timedelta(seconds=2))


def test_alert_ids_differ_by_rule_and_subject() -> None:
    ids = {
        alert_id("hot", "GPU-1", T0),
        alert_id("hot", "GPU-2", T0),
        alert_id("cold", "GPU-1", T0),
        alert_id("hot", "GPU-1", T0 + timedelta(microseconds=1)),
    }
    assert len(ids) == 4


def test_a_restored_alert_is_not_fired_again_and_resolves_under_its_own_id() -> None:
    engine = engine_of(hot_rule(duration_s=2))
    engine.restore_firing("hot", "GPU-1", "al-restored", since=T0 - timedelta(minutes=5))
    assert feed(engine, [[sample(s, temperature_c=95)] for s in range(5)]) == []
    (resolved,) = engine.observe("n1", [sample(5, temperature_c=60)])
    assert (resolved.state, resolved.alert_id) == ("resolved", "al-restored")


def test_replacing_the_rules_forgets_the_watches_of_rules_removed() -> None:
    hot, loud = (
        hot_rule(duration_s=0),
        hot_rule(rule_id="loud", metric="power_w", threshold=400, duration_s=0),
    )
    engine = engine_of(hot, loud)
    fired = engine.observe("n1", [sample(0, temperature_c=95, power_w=500)])
    assert sorted(t.rule.rule_id for t in fired) == ["hot", "loud"]
    engine.set_rules([loud])  # `hot` deleted while its alert was open
    assert set(engine.rules) == {"loud"}
    # No resolution comes from a rule that is gone; `loud`'s alert is still open.
    cooled = engine.observe("n1", [sample(1, temperature_c=40, power_w=100)])
    assert [(t.rule.rule_id, t.state) for t in cooled] == [("loud", "resolved")]
    # `hot` back: an episode of its own, not the one it had.
    engine.set_rules([hot, loud])
    (again,) = engine.observe("n1", [sample(2, temperature_c=95)])
    assert again.alert_id == alert_id("hot", "GPU-1", T0 + timedelta(seconds=2))


def test_a_rule_kept_across_a_reload_keeps_its_running_duration() -> None:
    hot = hot_rule(duration_s=2)
    engine = engine_of(hot)
    engine.observe("n1", [sample(0, temperature_c=95)])
    engine.observe("n1", [sample(1, temperature_c=95)])
    engine.set_rules([hot, hot_rule(rule_id="other", threshold=200)])
    (fired,) = engine.observe("n1", [sample(2, temperature_c=95)])
    assert (fired.rule.rule_id, fired.at) == ("hot", T0 + timedelta(seconds=2))


def test_an_instance_rule_resolves_when_any_gpu_of_the_instance_gets_busy() -> None:
    idle = Rule(
        "idle", "utilization_gpu_pct", "<", 5, 0, "info", tenant_id="a", action="stop_instance"
    )
    engine = engine_of(idle)

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
        ]

    (fired,) = engine.observe("n1", instance(0, 1.0, 2.0))
    assert (fired.subject, fired.value) == ("i-1", 2.0)
    (resolved,) = engine.observe("n1", instance(1, 1.0, 60.0))
    assert (resolved.state, resolved.subject, resolved.value) == ("resolved", "i-1", 60.0)


def test_an_instance_rule_leaves_out_gpus_that_run_no_instance() -> None:
    idle = Rule("idle", "utilization_gpu_pct", "<", 5, 0, "info", action="stop_instance")
    engine = engine_of(idle)
    # An unowned idle GPU (no instance on it) has nothing to stop.
    assert engine.observe("n1", [sample(0, utilization_gpu_pct=0.0)]) == []
    fired = engine.observe(
        "n1", [sample(1, utilization_gpu_pct=0.0, tenant_id="a", instance_id="i-9")]
    )
    assert [(t.subject, t.instance_id) for t in fired] == [("i-9", "i-9")]
