"""Alert rules as the API takes and shows them (schemas.py) and as the engine gets them
from the store (alert_rules.rule_of, rule_view): defaults, the bounds a request is
refused at, the camelCase wire names, and a webhook secret shown only when made."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from gpucloud_libs.events import GpuSample
from gpucloud_monitoring.alert_rules import rule_of, rule_view
from gpucloud_monitoring.documents import RuleDoc
from gpucloud_monitoring.rules import METRICS, Rule, metric_value
from gpucloud_monitoring.schemas import AlertRuleCreate, AlertRuleUpdate, NodeQuarantine

CREATED = datetime(2026, 11, 1, tzinfo=UTC)


def create(**fields: Any) -> AlertRuleCreate:
    body: dict[str, Any] = {"name": "hot", "metric": "temperature_c", "threshold": 90}
    body.update(fields)
    return AlertRuleCreate.model_validate(body)


def a_rule_doc(**fields: Any) -> RuleDoc:
    doc: RuleDoc = {
        "_id": "rule-1", "tenant_id": "t-a", "name": "hot", "metric": "temperature_c",
        "comparison": ">", "threshold": 90.0, "duration_s": 60.0, "severity": "warning",
        "node": None, "webhook_url": None, "enabled": True, "created_by": "u-1",
        "created_at": CREATED,
    }  # fmt: skip
    return {**doc, **fields}  # type: ignore[typeddict-item]


def test_a_rule_names_only_its_metric_and_threshold_the_rest_defaults() -> None:
    body = create()
    assert (body.comparison, body.duration_s, body.severity, body.action) == (
        ">",
        60,
        "warning",
        "notify",
    )
    assert (body.node, body.webhook_url) == (None, None)


def test_a_rule_is_taken_in_camel_case_and_by_its_python_names() -> None:
    wire = create(durationS=5, webhookURL="https://hooks.example.com/a")
    python = create(duration_s=5, webhook_url="https://hooks.example.com/a")
    assert (wire.duration_s, wire.webhook_url) == (5, "https://hooks.example.com/a")
    assert wire == python


@pytest.mark.parametrize(
    "fields",
    [
        {"metric": "fan_speed"},
        {"metric": "TEMPERATURE_C"},
        {"comparison": "=="},
        {"comparison": "!="},
        {"durationS": -1},
        {"durationS": 86_401},
        {"severity": "fatal"},
        {"action": "reboot"},
        {"name": ""},
        {"name": "x" * 129},
        {"name": "hot\x00"},
        {"node": "n" * 254},
        {"webhookURL": "https://hooks.example.com/" + "a" * 2048},
        {"threshold": "ninety"},
        {"tenantID": "t-b"},  # a caller cannot name another tenant
        {"enabled": False},  # not a field of a new rule
    ],
)
def test_a_rule_out_of_bounds_is_refused(fields: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        create(**fields)


@pytest.mark.parametrize("duration", [0, 86_400])
def test_a_duration_at_either_bound_is_taken(duration: int) -> None:
    assert create(durationS=duration).duration_s == duration


@pytest.mark.parametrize("metric", METRICS)
def test_every_metric_a_rule_may_name_is_read_from_a_sample(metric: str) -> None:
    sample = GpuSample(
        gpu_uuid="GPU-1", index=0, at=CREATED, utilization_gpu_pct=1.0,
        utilization_memory_pct=2.0, memory_used_mib=3.0, memory_total_mib=4.0,
        temperature_c=5.0, power_w=6.0, sm_clock_mhz=7.0, ecc_corrected=8,
        ecc_uncorrected=9, xid_errors=(79,),
    )  # fmt: skip
    assert create(metric=metric).metric == metric
    assert isinstance(metric_value(sample, metric), float)


def test_an_update_tells_a_removed_webhook_from_one_left_alone() -> None:
    removed = AlertRuleUpdate.model_validate({"webhookURL": None})
    untouched = AlertRuleUpdate.model_validate({"threshold": 80})
    assert "webhook_url" in removed.model_fields_set
    assert "webhook_url" not in untouched.model_fields_set
    assert untouched.threshold == 80


@pytest.mark.parametrize(
    "fields", [{"durationS": 86_401}, {"name": ""}, {"metric": "power_w"}, {"action": "notify"}]
)
def test_an_update_cannot_change_what_a_rule_watches_or_break_its_bounds(
    fields: dict[str, Any],
) -> None:
    with pytest.raises(ValidationError):
        AlertRuleUpdate.model_validate(fields)


@pytest.mark.parametrize(("reason", "taken"), [("", False), ("x", True), ("x" * 200, True),
                                               ("x" * 201, False)])  # fmt: skip
def test_a_quarantine_gives_a_reason_of_at_most_200_characters(reason: str, taken: bool) -> None:
    if taken:
        assert NodeQuarantine(reason=reason).reason == reason
    else:
        with pytest.raises(ValidationError):
            NodeQuarantine(reason=reason)


def test_a_stored_rule_becomes_the_engines_rule() -> None:
    doc = a_rule_doc(node="n1", action="stop_instance", comparison="<", threshold=5.0)
    assert rule_of(doc) == Rule(
        rule_id="rule-1", metric="temperature_c", comparison="<", threshold=5.0,
        duration_s=60.0, severity="warning", tenant_id="t-a", node="n1", action="stop_instance",
    )  # fmt: skip


def test_a_rule_stored_before_actions_existed_notifies() -> None:
    rule = rule_of(a_rule_doc(tenant_id=None))
    assert (rule.action, rule.per_instance, rule.tenant_id) == ("notify", False, None)


def test_a_rules_view_never_shows_the_stored_secret() -> None:
    doc = a_rule_doc(webhook_url="https://hooks.example.com/a", webhook_secret="gAAAA-sealed")
    view = rule_view(doc)
    assert view.webhook_secret is None
    wire = view.model_dump(by_alias=True, mode="json")
    assert "gAAAA-sealed" not in str(wire)
    assert wire["webhookURL"] == "https://hooks.example.com/a"
    assert (wire["ruleID"], wire["tenantID"], wire["enabled"]) == ("rule-1", "t-a", True)


def test_a_rules_view_shows_a_new_secret_once_when_given() -> None:
    view = rule_view(a_rule_doc(webhook_url="https://h.example.com/"), new_secret="whsec_new")
    assert view.model_dump(by_alias=True)["webhookSecret"] == "whsec_new"


def test_a_rule_stored_without_its_enabled_flag_or_action_reads_as_enabled_and_notify() -> None:
    doc = a_rule_doc()
    del doc["enabled"]  # type: ignore[misc]
    view = rule_view(doc)
    assert (view.enabled, view.action) == (True, "notify")
