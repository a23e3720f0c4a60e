"""The documents and pod shapes the instances service's unit tests build on: each test
names only what it is about."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

from gpucloud_instances import manifests
from gpucloud_instances.documents import SpecDoc
from gpucloud_instances.schemas import InstanceTemplate

CREATED = datetime(2026, 11, 1, tzinfo=UTC)


def a_spec(**fields: Any) -> SpecDoc:
    """A one-H100 spec in any zone, with `fields` changed (`name` sets the id too)."""
    name = fields.get("name", "h100-1")
    spec: SpecDoc = {
        "_id": name, "name": name, "cpu": "8", "memory": "64Gi", "gpu_type": "H100",
        "gpu_num": 1, "zones": [], "created_at": CREATED,
    }  # fmt: skip
    return {**spec, **fields}  # type: ignore[typeddict-item]


POD = manifests.WorkloadPod(
    namespace_name="ns", tenant_id="t", spec_name="s", image="busybox",
    template=InstanceTemplate(), cpu="1", memory="1Gi", gpus=1, gpu_type="A100", zones=[],
)  # fmt: skip


def a_pod(**fields: Any) -> manifests.WorkloadPod:
    """A one-A100 pod of tenant `t`, with `fields` changed."""
    return dataclasses.replace(POD, **fields)
