"""What `gpucloud apply` decides from a file and the object as it is, and what
`gpucloud offer` prices: the parts of the CLI that need no server."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gpucloud_cli.apply import declared, matches, service_changes
from gpucloud_cli.catalog import offers
from gpucloud_cli.session import Failure

CURRENT: dict[str, Any] = {
    "serviceID": "chat", "specName": "h100x1", "port": 8000, "image": "vllm:0.6",
    "minReplicas": 1, "maxReplicas": 2, "env": [{"name": "MODEL", "value": "qwen"}],
    "strategy": {"maxSurge": 1, "maxUnavailable": 0},
}  # fmt: skip


def service(**fields: Any) -> Any:
    return declared({"kind": "service", "serviceID": "chat", **fields}, "chat.yaml")


def test_a_document_names_its_kind_and_its_name() -> None:
    item = declared({"kind": "job", "jobID": "train", "image": "x"}, "train.yaml")
    assert (item.kind, item.name, item.body["image"]) == ("job", "train", "x")
    with pytest.raises(Failure, match="no kind"):
        declared({"jobID": "train"}, "a.yaml")
    with pytest.raises(Failure, match="unknown kind 'pod'"):
        declared({"kind": "pod"}, "a.yaml")
    with pytest.raises(Failure, match="needs its name as instanceID"):
        declared({"kind": "instance"}, "a.yaml")
    with pytest.raises(Failure, match="must be a mapping"):
        declared(["kind", "job"], "a.yaml")


def test_fields_the_file_leaves_out_are_not_compared() -> None:
    assert matches({"maxSurge": 1}, {"maxSurge": 1, "maxUnavailable": 0})
    assert not matches({"maxSurge": 2}, {"maxSurge": 1})
    assert not matches([{"name": "A"}], [{"name": "A"}, {"name": "B"}])


def test_applying_the_same_service_again_changes_nothing() -> None:
    same = service(specName="h100x1", image="vllm:0.6", env=[{"name": "MODEL", "value": "qwen"}])
    assert service_changes(same, CURRENT) == {}


def test_a_changed_image_is_patched_and_a_raised_floor_lifts_the_ceiling() -> None:
    changed = service(image="vllm:0.7", minReplicas=3)
    assert service_changes(changed, CURRENT) == {
        "image": "vllm:0.7", "minReplicas": 3, "maxReplicas": 3,
    }  # fmt: skip


def test_a_field_fixed_at_creation_is_refused_with_the_way_out() -> None:
    with pytest.raises(Failure, match=r"cannot change port 8000 to 9000 in place.*delete it"):
        service_changes(service(port=9000), CURRENT)


def test_a_field_the_api_does_not_know_goes_through_so_its_422_names_it() -> None:
    assert service_changes(service(replicaz=3), CURRENT) == {"replicaz": 3}


def test_an_offer_is_the_price_in_force_times_the_gpus() -> None:
    now = datetime.now(UTC)
    past, future = (now - timedelta(days=1)).isoformat(), (now + timedelta(days=1)).isoformat()
    specs: list[dict[str, Any]] = [
        {"name": "h100x8", "gpuType": "H100", "gpuNum": 8, "cpu": "96", "memory": "1Ti"},
        {"name": "h100x1", "gpuType": "H100", "gpuNum": 1, "cpu": "12", "memory": "128Gi"},
        {"name": "l4x1", "gpuType": "L4", "gpuNum": 1, "cpu": "4", "memory": "16Gi"},
    ]
    prices: list[dict[str, Any]] = [
        {"specName": "h100x8", "meter": "gpu_hour", "amount": "2.50", "effectiveFrom": past},
        {"specName": "h100x8", "meter": "gpu_hour", "amount": "9.00", "effectiveFrom": future},
        {"specName": "h100x1", "meter": "gpu_hour", "amount": 2.75, "effectiveFrom": past},
        {"specName": "l4x1", "meter": "gb_month", "amount": "0.02", "effectiveFrom": past},
    ]
    rows = {row["specName"]: row["pricePerHour"] for row in offers(specs, prices, [])}
    assert rows == {"h100x1": "$2.75/h", "h100x8": "$20.00/h", "l4x1": "no price set"}
    assert [row["specName"] for row in offers(specs, prices, [])] == ["h100x1", "h100x8", "l4x1"]


def test_an_offer_counts_the_starts_that_fit_now_node_by_node_in_each_zone() -> None:
    specs: list[dict[str, Any]] = [
        {"name": "h100x8", "gpuType": "H100", "gpuNum": 8, "cpu": "96", "memory": "1Ti"},
        {"name": "h100x2", "gpuType": "H100", "gpuNum": 2, "cpu": "24", "memory": "256Gi"},
        {"name": "mig", "gpuType": "H100", "gpuNum": 1, "cpu": "4", "memory": "16Gi",
         "gpuWeight": "1/7"},
        {"name": "l4x1", "gpuType": "L4", "gpuNum": 1, "cpu": "4", "memory": "16Gi"},
        {"name": "h100-a", "gpuType": "H100", "gpuNum": 1, "cpu": "4", "memory": "16Gi",
         "zones": ["zone-a"]},
    ]  # fmt: skip
    capacity = [
        {"zone": "zone-a", "gpuType": "H100", "freeByNode": [8, 3, 1]},
        {"zone": "zone-b", "gpuType": "H100", "freeByNode": [5]},
    ]
    free = {row["specName"]: row["freeNow"] for row in offers(specs, [], capacity)}
    # Eight free GPUs spread over nodes are not one 8-GPU start: packing is per node.
    assert free == {
        "h100x8": {"zone-a": 1, "zone-b": 0},
        "h100x2": {"zone-a": 5, "zone-b": 2},
        "mig": None,
        "l4x1": {},
        "h100-a": {"zone-a": 12},  # only where the spec may run
    }
