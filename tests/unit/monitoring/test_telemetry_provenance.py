"""What the telemetry consumer takes before counting anything (provenance.py, review M4):
node reports under their own node's seal, and operator requests under the monitoring
service's seal alone (fleet_requests.py), which no node holds. The cluster's node list
(known_nodes.py) needs Kubernetes and is left out here (`nodes=None`)."""

from __future__ import annotations

import hashlib
import hmac
import logging
from datetime import UTC, datetime

import pytest

from gpucloud_libs.events import (
    CloudEvent,
    GpuSample,
    NodeHealthRequest,
    NodeInventory,
    NodeQuarantineRequested,
    NodeReleaseRequested,
    TelemetryBatch,
)
from gpucloud_libs.node_seals import node_key, seal
from gpucloud_monitoring.fleet_requests import FleetRequestSeal
from gpucloud_monitoring.node_keys import NodeSeals
from gpucloud_monitoring.provenance import Provenance, Reports

TELEMETRY_SECRET = "the-telemetry-secret-only-monitoring-holds-0123456789"
SEALING_KEY = "the-monitoring-services-own-sealing-key-0123456789ab"
AT = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
SAMPLE = GpuSample(
    gpu_uuid="GPU-0", index=0, at=AT, utilization_gpu_pct=0.0, utilization_memory_pct=0.0,
    memory_used_mib=0.0, memory_total_mib=81_559, temperature_c=40, power_w=70,
)  # fmt: skip


def batch(node: str, *, sealed_as: str | None = None) -> TelemetryBatch:
    """`node`'s batch, sealed with `sealed_as`'s key (its own by default; "" for none)."""
    report = TelemetryBatch(node=node, source="nvml", samples=(SAMPLE,))
    signer = node if sealed_as is None else sealed_as
    return seal(node_key(TELEMETRY_SECRET, signer), report) if signer else report


def inventory(node: str, *, sealed_as: str | None = None) -> NodeInventory:
    report = NodeInventory(node=node, source="nvml", at=AT)
    signer = node if sealed_as is None else sealed_as
    return seal(node_key(TELEMETRY_SECRET, signer), report) if signer else report


def release(node: str = "n1", by: str = "ops@example.com") -> NodeReleaseRequested:
    return NodeReleaseRequested(node=node, requested_by=by, at=AT)


def quarantine(node: str = "n1", reason: str = "a suspect GPU") -> NodeQuarantineRequested:
    return NodeQuarantineRequested(node=node, requested_by="ops@example.com", reason=reason, at=AT)


def test_a_nodes_key_is_its_own_and_the_same_each_time() -> None:
    seals = NodeSeals(TELEMETRY_SECRET)
    assert seals.key("n1") == node_key(TELEMETRY_SECRET, "n1")
    assert seals.key("n1") == seals.key("n1")
    assert len(seals.key("n1")) == 32
    assert seals.key("n1") != seals.key("n2")
    assert NodeSeals("another-telemetry-secret-0123456789abcdef").key("n1") != seals.key("n1")


def test_refused_reports_are_all_counted_but_logged_once_a_minute_per_node(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seals = NodeSeals(TELEMETRY_SECRET)
    forged = [batch("n2", sealed_as="n1") for _ in range(5)] + [batch("n3", sealed_as="")]
    with caplog.at_level(logging.WARNING, logger="gpucloud_monitoring.node_keys"):
        assert seals.genuine(forged) == []
    assert seals.refused == 6
    logged = [r for r in caplog.records if r.name == "gpucloud_monitoring.node_keys"]
    assert sorted(r.__dict__["node"] for r in logged) == ["n2", "n3"]
    assert {r.__dict__["report"] for r in logged} == {"io.gpucloud.telemetry.batch.v1"}


def test_genuine_reports_keep_their_order() -> None:
    seals = NodeSeals(TELEMETRY_SECRET)
    reports = [batch("n3"), batch("n1", sealed_as="n2"), batch("n1"), batch("n2")]
    assert [r.node for r in seals.genuine(reports)] == ["n3", "n1", "n2"]
    assert seals.refused == 1


@pytest.mark.parametrize("request_", [release(), quarantine()])
def test_a_sealed_request_is_genuine_and_carries_its_seal(request_: NodeHealthRequest) -> None:
    sealing = FleetRequestSeal(SEALING_KEY)
    sealed = sealing.seal(request_)
    assert request_.mac == ""  # the original is left as it was
    assert len(sealed.mac) == 64
    assert sealing.genuine(sealed)
    assert not sealing.genuine(request_)


def test_a_sealed_request_stays_genuine_over_kafka() -> None:
    sealing = FleetRequestSeal(SEALING_KEY)
    sealed = sealing.seal(quarantine(reason="fans at 100 % — check them"))
    _, value, headers = CloudEvent.new(sealed, source="/tests").to_kafka()
    received = CloudEvent.from_kafka(value, headers).data
    assert isinstance(received, NodeQuarantineRequested)
    assert sealing.genuine(received)


@pytest.mark.parametrize(
    "change",
    [{"node": "n2"}, {"requested_by": "node-agent"}, {"at": datetime(2026, 11, 2, tzinfo=UTC)}],
)
def test_a_sealed_release_changed_in_any_field_is_refused(change: dict[str, object]) -> None:
    sealing = FleetRequestSeal(SEALING_KEY)
    sealed = sealing.seal(release())
    assert not sealing.genuine(sealed.model_copy(update=change))


def test_a_releases_seal_does_not_pass_for_a_quarantine() -> None:
    sealing = FleetRequestSeal(SEALING_KEY)
    mac = sealing.seal(release()).mac
    assert not sealing.genuine(quarantine().model_copy(update={"mac": mac}))


def test_only_the_services_own_key_seals_a_request() -> None:
    ours, theirs = FleetRequestSeal(SEALING_KEY), FleetRequestSeal("another-key-0123456789abcdef")
    assert not ours.genuine(theirs.seal(release()))
    # Nor does the sealing key itself, used directly: requests have a key of their own.
    request_ = release()
    direct = hmac.new(
        SEALING_KEY.encode(), request_.model_dump_json(exclude={"mac"}).encode(), hashlib.sha256
    ).hexdigest()
    assert not ours.genuine(request_.model_copy(update={"mac": direct}))


async def test_the_consumer_takes_only_reports_sealed_by_their_node_and_sealed_requests() -> None:
    sealing = FleetRequestSeal(SEALING_KEY)
    seals = NodeSeals(TELEMETRY_SECRET)
    provenance = Provenance(seals, sealing, nodes=None)
    honest_batch, honest_inventory = batch("n1"), inventory("n2")
    honest_release = sealing.seal(release("n1"))
    taken = await provenance.taken(
        Reports(
            batches=[honest_batch, batch("n2", sealed_as="n1"), batch("n3", sealed_as="")],
            inventories=[inventory("n1", sealed_as="n2"), honest_inventory],
            requests=[release("n1"), honest_release, quarantine("n1")],
        )
    )
    assert taken == Reports([honest_batch], [honest_inventory], [honest_release])
    assert seals.refused == 3


async def test_a_node_agent_cannot_seal_an_operators_request_with_its_node_key() -> None:
    """Every GPU node writes to the telemetry topic; its own key seals its reports only."""
    provenance = Provenance(NodeSeals(TELEMETRY_SECRET), FleetRequestSeal(SEALING_KEY), nodes=None)
    key = node_key(TELEMETRY_SECRET, "n1")
    request_ = release("n1", by="node-agent")
    mac = hmac.new(key, request_.model_dump_json(exclude={"mac"}).encode(), hashlib.sha256)
    forged = request_.model_copy(update={"mac": mac.hexdigest()})
    taken = await provenance.taken(Reports([], [], [forged]))
    assert taken.requests == []


async def test_nothing_to_take_is_nothing_taken() -> None:
    provenance = Provenance(NodeSeals(TELEMETRY_SECRET), FleetRequestSeal(SEALING_KEY), nodes=None)
    assert await provenance.taken(Reports([], [], [])) == Reports([], [], [])
