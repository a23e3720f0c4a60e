"""Warm stocks' Kubernetes objects (stocks/manifests.py) and what the stocks API says of
them (stocks/targets.py, stocks/schemas.py): a placeholder finds a node for a unit at
the lowest priority and pulls the stock's images there; a hold keeps an armed unit's
GPUs, never bound; a stock change is refused when malformed."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from gpucloud_instances import manifests
from gpucloud_instances.stocks.documents import StockUnitDoc
from gpucloud_instances.stocks.manifests import (
    PLACEHOLDER_IMAGE,
    PREPULL_DIR,
    hold_name,
    placeholder_pod,
    stock_hold_pod,
)
from gpucloud_instances.stocks.schemas import StockChange
from gpucloud_instances.stocks.targets import stock_status

from .fixtures import a_spec

AT = datetime(2026, 11, 1, tzinfo=UTC)
SPEC = a_spec(name="h100x2", cpu="16", memory="128Gi", gpu_type="NVIDIA-H100", gpu_num=2)


def test_a_placeholder_asks_for_its_specs_unit_at_the_stocks_priority() -> None:
    pod = placeholder_pod("gpucloud-stock", "stock-h100x2-ab12", SPEC)
    assert pod["metadata"] == {
        "name": "stock-h100x2-ab12", "namespace": "gpucloud-stock",
        "labels": {manifests.MANAGED: "true", manifests.STOCK: "h100x2"},
    }  # fmt: skip
    spec = pod["spec"]
    assert spec["priorityClassName"] == manifests.STOCK_PRIORITY_CLASS
    [hold] = spec["containers"]
    amounts = {"cpu": "16", "memory": "128Gi", "nvidia.com/gpu": "2"}
    assert hold["resources"] == {"requests": amounts, "limits": amounts}
    assert hold["image"] == PLACEHOLDER_IMAGE
    assert spec["nodeSelector"] == {manifests.GPU_PRODUCT_LABEL: "NVIDIA-H100"}
    assert spec["terminationGracePeriodSeconds"] == 0  # it makes way at once


def test_a_placeholder_runs_unprivileged_and_without_the_apis_token() -> None:
    spec = placeholder_pod("gpucloud-stock", "u", SPEC)["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] == 65535
    assert spec["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_a_placeholder_of_a_zoned_mig_spec_asks_for_slices_in_those_zones() -> None:
    sliced = a_spec(
        gpu_resource="nvidia.com/mig-1g.10gb", gpu_weight="1/7", gpu_num=3, zones=["zone-b"]
    )
    spec = placeholder_pod("gpucloud-stock", "u", sliced)["spec"]
    assert spec["containers"][0]["resources"]["limits"]["nvidia.com/mig-1g.10gb"] == "3"
    assert manifests.placement_zones({"spec": spec}) == ["zone-b"]


def test_a_placeholder_without_images_pulls_nothing() -> None:
    spec = placeholder_pod("gpucloud-stock", "u", SPEC, images=[])["spec"]
    assert "initContainers" not in spec
    assert "volumes" not in spec


def test_a_placeholder_pulls_each_stock_image_by_running_a_copied_true_in_it() -> None:
    """Any image, with or without a shell, exits at once: a static busybox is copied
    into a shared directory first, and each image runs its `true`."""
    images = ["nvcr.io/nvidia/pytorch:24.01-py3", "vllm/vllm-openai:v0.6.3"]
    spec = placeholder_pod("gpucloud-stock", "u", SPEC, images=images)["spec"]
    tool, *pulls = spec["initContainers"]
    assert tool["command"] == ["/bin/busybox", "cp", "/bin/busybox", f"{PREPULL_DIR}/busybox"]
    assert [(p["name"], p["image"]) for p in pulls] == [
        ("prepull-0", images[0]), ("prepull-1", images[1]),
    ]  # fmt: skip
    assert {tuple(p["command"]) for p in pulls} == {(f"{PREPULL_DIR}/busybox", "true")}
    for step in spec["initContainers"]:
        assert step["volumeMounts"] == [{"name": "prepull", "mountPath": PREPULL_DIR}]
        assert step["resources"]["limits"] == {"memory": "16Mi"}
        assert step["securityContext"]["allowPrivilegeEscalation"] is False
    assert spec["volumes"] == [{"name": "prepull", "emptyDir": {"sizeLimit": "16Mi"}}]


def test_a_hold_keeps_the_units_gpus_gated_so_that_it_is_never_bound() -> None:
    resources: dict[str, Any] = {"requests": {"nvidia.com/gpu": "2"}, "limits": {}}
    pod = stock_hold_pod(
        namespace_name="gpucloud-stock", unit="stock-h100x2-ab12", spec_name="h100x2",
        resources=resources,
    )  # fmt: skip
    assert pod["metadata"]["name"] == hold_name("stock-h100x2-ab12") == "stock-h100x2-ab12-hold"
    assert pod["metadata"]["labels"] == {
        manifests.MANAGED: "true", manifests.STOCK: "h100x2", manifests.STOCK_HOLD: "true",
    }  # fmt: skip
    assert pod["spec"]["schedulingGates"] == [{"name": manifests.STOCK_HOLD}]
    # At an instance's priority: nothing of the tenants' preempts a unit being claimed.
    assert pod["spec"]["priorityClassName"] == manifests.INSTANCE_PRIORITY_CLASS
    assert pod["spec"]["containers"][0]["resources"] is resources


def unit(name: str, spec_name: str, state: str) -> StockUnitDoc:
    return StockUnitDoc(
        _id=name, cluster="local", spec_name=spec_name, state=state, node=None, zone=None,
        created_at=AT,
    )  # fmt: skip


def test_a_stocks_status_names_its_images_and_a_spec_with_no_units_counts_none() -> None:
    units = [unit("u1", "h100x2", "available"), unit("u2", "l40s", "placing")]
    [idle, h100] = stock_status(  # by spec name
        {("local", "h100x2"): 2, ("local", "a100"): 1},
        units,
        {("local", "h100x2"): ["nvcr.io/nvidia/pytorch:24.01-py3"]},
    )
    assert (idle.spec_name, idle.target, idle.available, idle.placing) == ("a100", 1, 0, 0)
    assert idle.images == []
    assert (h100.spec_name, h100.available, h100.images) == (
        "h100x2", 1, ["nvcr.io/nvidia/pytorch:24.01-py3"],
    )  # fmt: skip


def test_units_of_a_spec_no_longer_stocked_are_not_reported() -> None:
    assert stock_status({}, [unit("u1", "h100x2", "available")]) == []


def test_a_stock_change_names_a_spec_an_operation_and_up_to_four_images() -> None:
    change = StockChange.model_validate(
        {"number": 3, "operationID": "op-1", "specName": "h100x2", "images": ["busybox"]}
    )
    assert (change.number, change.operation_id, change.images) == (3, "op-1", ["busybox"])
    assert (
        StockChange.model_validate(
            {"number": 1, "operationID": "op-2", "specName": "h100x2"}
        ).images
        is None
    )  # left out: the stock keeps its list


@pytest.mark.parametrize(
    "fields",
    [{"number": 0}, {"number": 1001}, {"operationID": ""}, {"specName": "H100"},
     {"images": ["busybox"] * 5}, {"images": ["10.0.0.1:5000/x"]}],
)  # fmt: skip
def test_a_malformed_stock_change_is_refused(fields: dict[str, Any]) -> None:
    body = {"number": 1, "operationID": "op-1", "specName": "h100x2", **fields}
    with pytest.raises(ValidationError):
        StockChange.model_validate(body)
