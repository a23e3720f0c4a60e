"""Alert rules evaluated in the stream of samples. Pure: fed samples, it returns
alert transitions (firing, resolved), each exactly once per episode.

A rule is a metric, a comparison with a threshold, and a duration: it fires for
a subject (a GPU) once the condition has held for the whole duration, and
resolves at the first sample where it no longer holds. A fleet rule watches
every GPU; a tenant rule only GPUs running that tenant's instances.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from gpucloud_libs.events import GpuSample
from gpucloud_libs.naming import HOST_SEPARATOR

Metric = Literal[
    "utilization_gpu_pct",
    "utilization_memory_pct",
    "memory_used_mib",
    "temperature_c",
    "power_w",
    "sm_clock_mhz",
    "ecc_corrected",
    "ecc_uncorrected",
    "xid_count",
]
METRICS: tuple[str, ...] = Metric.__args__  # type: ignore[attr-defined]
Comparison = Literal[">", ">=", "<", "<="]


def metric_value(sample: GpuSample, metric: str) -> float | None:
    if metric == "xid_count":
        return float(len(sample.xid_errors))
    value = getattr(sample, metric)
    return None if value is None else float(value)


def holds(value: float, comparison: str, threshold: float) -> bool:
    if comparison == ">":
        return value > threshold
    if comparison == ">=":
        return value >= threshold
    if comparison == "<":
        return value < threshold
    return value <= threshold


@dataclass(frozen=True)
class Rule:
    rule_id: str
    metric: str
    comparison: str
    threshold: float
    duration_s: float
    severity: str
    #: None: fleet-wide (platform admin); else only this tenant's instances' GPUs.
    tenant_id: str | None = None
    node: str | None = None
    #: `stop_instance` rules watch instances (every GPU of one), not single GPUs.
    action: str = "notify"

    @property
    def per_instance(self) -> bool:
        return self.action == "stop_instance"


@dataclass(frozen=True)
class AlertTransition:
    alert_id: str
    rule: Rule
    state: Literal["firing", "resolved"]
    subject: str
    node: str
    tenant_id: str | None
    instance_id: str | None
    value: float
    at: datetime


@dataclass
class _Watch:
    since: datetime | None = None
    firing_id: str | None = None


class RuleEngine:
    def __init__(self) -> None:
        self.rules: dict[str, Rule] = {}
        self._watches: dict[tuple[str, str], _Watch] = {}

    def set_rules(self, rules: list[Rule]) -> None:
        """Replace the rule set; the watches of removed rules are forgotten."""
        self.rules = {rule.rule_id: rule for rule in rules}
        self._watches = {key: watch for key, watch in self._watches.items() if key[0] in self.rules}

    def restore_firing(self, rule_id: str, subject: str, alert_id: str, since: datetime) -> None:
        self._watches[(rule_id, subject)] = _Watch(since=since, firing_id=alert_id)

    def observe(self, node: str, samples: list[GpuSample]) -> list[AlertTransition]:
        """One node's batch. A GPU rule watches each GPU; an instance rule watches each
        instance on the node through its busiest GPU (the value furthest from holding
        for a `<` rule), so it holds only when it holds for all of the instance's GPUs."""
        transitions: list[AlertTransition] = []
        for rule in self.rules.values():
            if rule.node is not None and rule.node != node:
                continue
            mine = [s for s in samples if rule.tenant_id is None or s.tenant_id == rule.tenant_id]
            if rule.per_instance:
                watched = _by_instance(mine, rule.metric)
            else:
                watched = [
                    (s.gpu_uuid, s, value)
                    for s in mine
                    if (value := metric_value(s, rule.metric)) is not None
                ]
            for subject, sample, value in watched:
                transitions += self._watch(rule, node, subject, sample, value)
        return transitions

    def _watch(
        self, rule: Rule, node: str, subject: str, sample: GpuSample, value: float
    ) -> list[AlertTransition]:
        key = (rule.rule_id, subject)
        watch = self._watches.setdefault(key, _Watch())
        if holds(value, rule.comparison, rule.threshold):
            watch.since = watch.since or sample.at
            held = (sample.at - watch.since).total_seconds()
            if watch.firing_id is None and held >= rule.duration_s:
                watch.firing_id = alert_id(rule.rule_id, subject, watch.since)
                return [
                    self._transition(watch.firing_id, rule, "firing", node, subject, sample, value)
                ]
            return []
        self._watches.pop(key, None)
        if watch.firing_id is None:
            return []
        return [self._transition(watch.firing_id, rule, "resolved", node, subject, sample, value)]

    @staticmethod
    def _transition(
        alert: str, rule: Rule, state: Literal["firing", "resolved"], node: str, subject: str,
        sample: GpuSample, value: float,
    ) -> AlertTransition:  # fmt: skip
        return AlertTransition(
            alert_id=alert, rule=rule, state=state, subject=subject, node=node,
            tenant_id=sample.tenant_id, instance_id=sample.instance_id, value=value, at=sample.at,
        )  # fmt: skip


def _by_instance(samples: list[GpuSample], metric: str) -> list[tuple[str, GpuSample, float]]:
    """(instance id, its latest sample, its busiest GPU's value) for each instance. A
    job's run or a service's replica (`job--…`, `svc--…`: workload ids hold `--`, an
    instance id never does) spans nodes and is stopped by no rule here: left out."""
    busiest: dict[str, tuple[GpuSample, float]] = {}
    for sample in samples:
        value = metric_value(sample, metric)
        if sample.instance_id is None or value is None or HOST_SEPARATOR in sample.instance_id:
            continue
        seen = busiest.get(sample.instance_id)
        if seen is None or value > seen[1]:
            busiest[sample.instance_id] = (sample, value)
    return [(instance, sample, value) for instance, (sample, value) in busiest.items()]


def alert_id(rule_id: str, subject: str, since: datetime) -> str:
    """Deterministic per episode: a replayed batch finds the same alert, not a new one."""
    digest = hashlib.sha256(f"{rule_id}|{subject}|{since.isoformat()}".encode()).hexdigest()
    return f"al-{digest[:20]}"
