"""CloudEvents binary-mode encoding of the event contracts."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from gpucloud_libs.events import (
    CloudEvent,
    InstanceStateChanged,
    MalformedEvent,
    TenantDeleted,
)


def lifecycle_event() -> CloudEvent:
    return CloudEvent.new(
        InstanceStateChanged(
            instance_id="inst-1",
            tenant_id="t-1",
            spec_name="h100x8",
            gpu_type="NVIDIA-H100-80GB-HBM3",
            gpu_count=8,
            state="running",
            previous_state="ready",
            sequence=3,
            at=datetime(2026, 1, 1, tzinfo=UTC),
        ),
        source="/gpucloud/instances",
    )


def test_roundtrip_keeps_every_attribute_and_keys_by_aggregate() -> None:
    event = lifecycle_event()
    key, value, headers = event.to_kafka()
    assert key == b"t-1/inst-1"
    assert headers["ce_subject"] == "t-1/inst-1"
    decoded = CloudEvent.from_kafka(value, headers)
    assert decoded == event
    assert isinstance(decoded.data, InstanceStateChanged)


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda h: h.pop("ce_specversion"), "ce_specversion"),
        (lambda h: h.update(ce_specversion="0.3"), "ce_specversion"),
        (lambda h: h.pop("ce_id"), "ce_id"),
        (lambda h: h.update(ce_type="io.gpucloud.tenant.deleted.v1"), "does not match"),
        (lambda h: h.update(ce_time="yesterday"), "invalid payload"),
    ],
)
def test_bad_headers_are_malformed(mutate: Callable[[dict[str, str]], object], reason: str) -> None:
    _, value, headers = lifecycle_event().to_kafka()
    mutate(headers)
    with pytest.raises(MalformedEvent, match=reason):
        CloudEvent.from_kafka(value, headers)


@pytest.mark.parametrize(
    "value",
    [
        b"not json",
        b'{"type": "io.gpucloud.unknown.v1"}',
        b'{"type": "io.gpucloud.tenant.deleted.v1"}',
        b'{"type": "io.gpucloud.tenant.deleted.v1", "tenant_id": "t", "extra": 1}',
    ],
)
def test_bad_payloads_are_malformed(value: bytes) -> None:
    _, _, headers = CloudEvent.new(TenantDeleted(tenant_id="t"), source="/x").to_kafka()
    with pytest.raises(MalformedEvent, match="invalid payload"):
        CloudEvent.from_kafka(value, headers)
