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

    def observe(self, node: str, sample: GpuSample) -> list[AlertTransition]:
        transitions: list[AlertTransition] = []
        for rule in self.rules.values():
            if rule.node is not None and rule.node != node:
                continue
            if rule.tenant_id is not None and sample.tenant_id != rule.tenant_id:
                continue
            value = metric_value(sample, rule.metric)
            if value is None:
                continue
            key = (rule.rule_id, sample.gpu_uuid)
            watch = self._watches.setdefault(key, _Watch())
            if holds(value, rule.comparison, rule.threshold):
                watch.since = watch.since or sample.at
                held = (sample.at - watch.since).total_seconds()
                if watch.firing_id is None and held >= rule.duration_s:
                    watch.firing_id = alert_id(rule.rule_id, sample.gpu_uuid, watch.since)
                    transitions.append(
                        self._transition(watch.firing_id, rule, "firing", node, sample, value)
                    )
            else:
                if watch.firing_id is not None:
                    transitions.append(
                        self._transition(watch.firing_id, rule, "resolved", node, sample, value)
                    )
                self._watches.pop(key, None)
        return transitions

    @staticmethod
    def _transition(
        alert: str, rule: Rule, state: Literal["firing", "resolved"], node: str,
        sample: GpuSample, value: float,
    ) -> AlertTransition:  # fmt: skip
        return AlertTransition(
            alert_id=alert, rule=rule, state=state, subject=sample.gpu_uuid, node=node,
            tenant_id=sample.tenant_id, instance_id=sample.instance_id, value=value, at=sample.at,
        )  # fmt: skip


def alert_id(rule_id: str, subject: str, since: datetime) -> str:
    """Deterministic per episode: a replayed batch finds the same alert, not a new one."""
    digest = hashlib.sha256(f"{rule_id}|{subject}|{since.isoformat()}".encode()).hexdigest()
    return f"al-{digest[:20]}"
