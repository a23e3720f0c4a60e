"""The pure parts of the storage, metering, monitoring and gateway capabilities."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from gpucloud_gateway.api_keys import key_view
from gpucloud_gateway.schemas import ALL_SCOPES, Principal
from gpucloud_gateway.tenants import effective_quota
from gpucloud_gateway.users import check_assignable
from gpucloud_libs.errors import Forbidden
from gpucloud_libs.naming import storage_claim_name, storage_env_prefix, storage_secret_name
from gpucloud_metering import ledger
from gpucloud_metering.changes import ChangeSet, by_tenant
from gpucloud_metering.documents import HealthChangeDoc, PriceDoc, TransitionDoc
from gpucloud_metering.tally import FaultBook, PriceBook, instances_from, tally
from gpucloud_monitoring.alerts import ended_by
from gpucloud_monitoring.documents import RollupDoc, RuleDoc
from gpucloud_monitoring.fleet import weighted_utilization
from gpucloud_monitoring.metrics import points
from gpucloud_monitoring.schemas import NodeView
from gpucloud_storage.accessors import access_key
from gpucloud_storage.attachments import attachment_plan
from gpucloud_storage.documents import AttachmentDoc
from gpucloud_storage.transfers import MAX_PLANNED_PARTS, part_size

AT = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
MIB = 1024 * 1024
HOUR = ledger.US_PER_HOUR

# --- storage ---------------------------------------------------------------------------


def test_parts_stay_at_the_floor_until_the_plan_would_list_too_many() -> None:
    floor = 64 * MIB
    assert part_size(10 * 1024 * MIB, floor) == floor
    huge = 500 * 1024**3  # 500 GiB: at the floor it would take 8,000 parts
    size = part_size(huge, floor)
    assert size % MIB == 0
    assert -(-huge // size) <= MAX_PLANNED_PARTS


def test_access_keys_look_like_aws_ids_and_do_not_repeat() -> None:
    keys = {access_key() for _ in range(200)}
    assert len(keys) == 200
    assert all(len(key) == 20 and key.startswith("GPC") and key.isalnum() for key in keys)


def test_an_attachment_plan_mounts_volumes_and_loads_object_credentials() -> None:
    attachment = AttachmentDoc(
        _id="acme/i-1", tenant_id="acme", instance_id="i-1", storage_ids=["vol", "bkt"],
        items=[
            {"storage_id": "vol", "kind": "volume", "read_only": False},
            {"storage_id": "bkt", "kind": "object", "read_only": True},
        ],
        accessor_ids=[], created_at=AT,
    )  # fmt: skip
    volume, bucket = attachment_plan(attachment).storages
    assert (volume.claim_name, volume.secret_name, volume.env_prefix) == (
        storage_claim_name("vol"), None, None
    )  # fmt: skip
    assert (bucket.claim_name, bucket.secret_name, bucket.env_prefix) == (
        None, storage_secret_name("bkt", "i-1"), storage_env_prefix("bkt")
    )  # fmt: skip


# --- metering --------------------------------------------------------------------------


def transition(instance: str, sequence: int, state: str, hour: int) -> TransitionDoc:
    return TransitionDoc(
        _id=f"acme/{instance}#{sequence}", event_id=f"e{sequence}", tenant_id="acme",
        instance_id=instance, sequence=sequence, state=state, at_us=hour * HOUR,
        spec_name="h100-1", gpu_type="H100", gpu_count=2, zone="zone-a", node="n1",
        user_id="u-1",
    )  # fmt: skip


def test_tally_prices_each_group_and_credits_quarantined_time() -> None:
    instances = instances_from(
        [
            transition("i-1", 1, "pending", 0),
            transition("i-1", 2, "scheduled", 1),
            transition("i-1", 3, "stopped", 4),
        ]
    )
    prices = PriceBook(
        [
            PriceDoc(
                _id="gpu_hour:h100-1@0", meter="gpu_hour", spec_name="h100-1", amount="2.5",
                effective_from=ledger.from_us(0), effective_from_us=0,
            )
        ]
    )  # fmt: skip
    faults = FaultBook(
        [
            HealthChangeDoc(_id="q", node="n1", at_us=2 * HOUR, health="quarantined"),
            HealthChangeDoc(_id="h", node="n1", at_us=3 * HOUR, health="healthy"),
        ]
    )
    rows = tally(
        instances, [], prices, faults, start_us=0, end_us=10 * HOUR, now_us=10 * HOUR,
        group_by="spec",
    )  # fmt: skip
    row = rows["h100-1"]
    # Three hours on 2 GPUs, one of them on a quarantined node: 4 GPU-h billed, 2 credited.
    assert row.gpu_us == 4 * HOUR
    assert row.credited_gpu_us == 2 * HOUR
    assert row.amount == Decimal("10.0")


def test_a_change_set_looks_at_everything_first_and_again_after_a_failed_pass() -> None:
    changes = ChangeSet()
    changes.add(("acme", "i-1"))
    assert changes.take() is None  # the first pass after a start reads everything
    changes.add(("acme", "i-1"), ("beta", "i-9"))
    taken = changes.take()
    assert taken == {("acme", "i-1"), ("beta", "i-9")}
    changes.give_back(taken)
    assert changes.take() == taken
    assert by_tenant({("acme", "i-1"), ("acme", "i-2")}) == {"acme": {"i-1", "i-2"}}


# --- monitoring ------------------------------------------------------------------------


def window(gpu: str, utilization: float, temperature_max: float) -> RollupDoc:
    return RollupDoc(
        _id=f"{gpu}@0", gpu_uuid=gpu, node="node-1", tenant_id=None, instance_id=None, start=AT,
        width_s=60, samples=60, memory_total_mib=81559.0, ecc_corrected=0, ecc_uncorrected=0,
        xids=[79] if gpu == "b" else [],
        utilization_gpu_pct_avg=utilization, utilization_gpu_pct_max=utilization,
        utilization_memory_pct_avg=utilization, utilization_memory_pct_max=utilization,
        memory_used_mib_avg=utilization, memory_used_mib_max=utilization,
        temperature_c_avg=utilization, temperature_c_max=temperature_max,
        power_w_avg=utilization, power_w_max=utilization,
    )  # fmt: skip


def test_a_series_averages_gpus_per_window_and_keeps_the_maxima() -> None:
    [point] = points("node-1", "1m", [window("a", 20.0, 70.0), window("b", 60.0, 91.0)]).points
    assert (point.gpus, point.utilization_gpu_pct) == (2, 40.0)
    assert point.temperature_c_max == 91.0
    assert point.xids == [79]


def test_fleet_utilisation_is_weighted_by_gpus_of_reporting_nodes() -> None:
    def node(gpus: int, utilization: float | None) -> NodeView:
        return NodeView(
            node="n", zone=None, gpu_type=None, gpus=gpus, tiers=[], health="healthy",
            health_reasons=[], health_since=None, gpus_in_use=0,
            utilization_gpu_pct=utilization, telemetry=None, unavailable_reason=None,
        )  # fmt: skip

    assert weighted_utilization([node(8, 50.0), node(2, 100.0), node(4, None)]) == 60.0
    assert weighted_utilization([node(4, None)]) is None
    rule = RuleDoc(
        _id="rule-1", tenant_id=None, name="hot", metric="temperature_c", comparison=">",
        threshold=90, duration_s=10, severity="critical", node=None, webhook_url=None,
        enabled=False, created_by="u-1", created_at=AT,
    )  # fmt: skip
    assert (ended_by(None), ended_by(rule)) == ("rule_deleted", "rule_disabled")


# --- gateway ---------------------------------------------------------------------------


def test_the_effective_quota_is_the_tighter_of_platform_and_tenant_field_by_field() -> None:
    limits = {"max_gpus": 16, "max_instances": None, "max_storage_bytes": 100}
    own = {"max_gpus": 8, "max_instances": 3, "max_storage_bytes": None}
    assert effective_quota(limits, own) == {
        "max_gpus": 8, "max_instances": 3, "max_storage_bytes": 100
    }  # fmt: skip


def principal(role: str, tenant_id: str | None) -> Principal:
    return Principal.model_validate(
        {"subject": "u-1", "userID": "u-1", "keyID": None, "role": role, "tenantID": tenant_id,
         "scopes": list(ALL_SCOPES), "via": "api_key"}
    )  # fmt: skip


def test_admins_assign_roles_only_within_their_own_kind() -> None:
    check_assignable(principal("tenant-admin", "acme"), "tenant-user")
    check_assignable(principal("platform-admin", None), "platform-admin")
    with pytest.raises(Forbidden):
        check_assignable(principal("tenant-admin", "acme"), "platform-admin")
    with pytest.raises(Forbidden):
        check_assignable(principal("platform-admin", None), "tenant-admin")


def test_a_key_view_never_shows_its_secret_hash_and_defaults_to_every_scope() -> None:
    view = key_view(
        {"_id": "k1", "secret_hash": "stored-hash-of-the-secret", "name": "ci", "user_id": "u-1", "tenant_id": "acme",
         "role": "tenant-user", "scopes": [], "created_at": AT, "expires_at": None,
         "revoked_at": None, "last_used_at": None}
    )  # fmt: skip
    assert "stored-hash-of-the-secret" not in view.model_dump_json()
    assert view.scopes == list(ALL_SCOPES)
