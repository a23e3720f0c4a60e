"""GPU tiers (tiers.py): the tier of each model name as NVML and node labels write it,
and how far a measured shortfall (a narrow or slow PCIe link, missing memory) lowers
it, at the exact thresholds."""

from __future__ import annotations

import pytest

from gpucloud_monitoring.tiers import TIERS, Capability, Classification, classify, model_tier


@pytest.mark.parametrize(
    ("model", "tier"),
    [
        ("NVIDIA GB200", "flagship"),
        ("NVIDIA B200", "flagship"),
        ("NVIDIA H200 141GB HBM3e", "flagship"),
        ("NVIDIA GH200 480GB", "flagship"),
        ("NVIDIA H100 NVL", "flagship"),
        ("NVIDIA-H100-80GB-HBM3", "flagship"),  # a node label's spelling
        ("nvidia h100 pcie", "flagship"),  # case does not matter
        ("NVIDIA A100-SXM4-80GB", "datacenter"),
        ("NVIDIA L40S", "datacenter"),  # before L4 and L40
        ("NVIDIA L40", "datacenter"),
        ("NVIDIA A800 80GB PCIe", "datacenter"),
        ("NVIDIA H800", "datacenter"),
        ("NVIDIA A40", "inference"),
        ("NVIDIA A30", "inference"),
        ("NVIDIA A10G", "inference"),
        ("NVIDIA L4", "inference"),
        ("Tesla T4", "inference"),
        ("NVIDIA RTX A6000", "workstation"),
        ("NVIDIA RTX 4000 Ada Generation", "workstation"),
        ("NVIDIA GeForce RTX 4090", "workstation"),
        ("Quadro RTX 8000", "workstation"),
        ("NVIDIA T1000", "unclassified"),
        ("", "unclassified"),
    ],
)
def test_a_model_name_gives_its_tier(model: str, tier: str) -> None:
    assert model_tier(model) == tier


@pytest.mark.parametrize(
    "model",
    ["NVIDIA RTX A1000 6GB Laptop GPU", "NVIDIA RTX A4000", "NVIDIA RTX A3000"],
)
def test_a_workstation_card_is_not_the_datacenter_model_its_name_begins_with(model: str) -> None:
    """A1000, A4000 and A3000 begin with A100, A40 and A30: a name is matched by its
    words, and a model followed by more digits is another model."""
    assert model_tier(model) == "workstation"


@pytest.mark.parametrize(
    ("model", "tier"), [("NVIDIA A10G", "inference"), ("NVIDIA T400", "unclassified")]
)
def test_a_model_with_a_letter_after_it_is_that_model_one_with_digits_is_not(
    model: str, tier: str
) -> None:
    assert model_tier(model) == tier


def test_an_unknown_model_says_so() -> None:
    assert classify(Capability("Mystery GPU", pcie_width_current=1, pcie_width_max=16)) == (
        Classification("unclassified", ("unknown model",))
    )


def test_a_gpu_that_measures_as_sold_keeps_its_models_tier() -> None:
    full = Capability(
        "NVIDIA H100 80GB HBM3",
        memory_total_mib=81_559,
        expected_memory_mib=81_559,
        pcie_gen_current=5,
        pcie_gen_max=5,
        pcie_width_current=16,
        pcie_width_max=16,
    )
    assert classify(full) == Classification("flagship", ())


def test_nothing_measured_is_no_shortfall() -> None:
    assert classify(Capability("NVIDIA A100")) == Classification("datacenter", ())


@pytest.mark.parametrize(("width", "lowered"), [(16, False), (8, True), (1, True)])
def test_any_narrower_pcie_link_lowers_the_tier(width: int, lowered: bool) -> None:
    result = classify(Capability("NVIDIA A100", pcie_width_current=width, pcie_width_max=16))
    assert result == (
        Classification("inference", (f"PCIe link x{width} of x16",))
        if lowered
        else Classification("datacenter", ())
    )


@pytest.mark.parametrize(
    ("current", "expected"),
    [
        (5, Classification("flagship", ())),
        (4, Classification("flagship", ())),  # one generation down: power saving at idle
        (3, Classification("datacenter", ("PCIe gen 3 of 5",))),
        (1, Classification("datacenter", ("PCIe gen 1 of 5",))),
    ],
)
def test_a_pcie_link_two_generations_down_lowers_the_tier(
    current: int, expected: Classification
) -> None:
    assert classify(Capability("NVIDIA H100", pcie_gen_current=current, pcie_gen_max=5)) == expected


@pytest.mark.parametrize(
    ("memory", "expected"),
    [
        (80_000.0, Classification("datacenter", ())),
        (72_000.0, Classification("datacenter", ())),  # exactly 90 %: still as sold
        (71_999.0, Classification("inference", ("71999 MiB of 80000 MiB",))),
        (40_000.0, Classification("inference", ("40000 MiB of 80000 MiB",))),
    ],
)
def test_memory_below_nine_tenths_of_the_models_lowers_the_tier(
    memory: float, expected: Classification
) -> None:
    capability = Capability("NVIDIA A100", memory_total_mib=memory, expected_memory_mib=80_000)
    assert classify(capability) == expected


def test_a_maximum_that_is_unknown_or_zero_is_not_compared() -> None:
    for capability in (
        Capability("NVIDIA L4", pcie_width_current=4, pcie_width_max=None),
        Capability("NVIDIA L4", pcie_width_current=4, pcie_width_max=0),
        Capability("NVIDIA L4", pcie_gen_current=1, pcie_gen_max=0),
        Capability("NVIDIA L4", memory_total_mib=1.0, expected_memory_mib=0),
        Capability("NVIDIA L4", memory_total_mib=1.0),
    ):
        assert classify(capability) == Classification("inference", ()), capability


def test_several_shortfalls_lower_the_tier_one_step_and_name_each() -> None:
    worst = Capability(
        "NVIDIA H100",
        memory_total_mib=40_000,
        expected_memory_mib=81_559,
        pcie_gen_current=2,
        pcie_gen_max=5,
        pcie_width_current=4,
        pcie_width_max=16,
    )
    assert classify(worst) == Classification(
        "datacenter",
        ("PCIe link x4 of x16", "PCIe gen 2 of 5", "40000 MiB of 81559 MiB"),
    )


@pytest.mark.parametrize(
    ("model", "lowered_to"),
    [
        ("NVIDIA H100", "datacenter"),
        ("NVIDIA A100", "inference"),
        ("NVIDIA L4", "workstation"),
        ("NVIDIA RTX A6000", "unclassified"),
    ],
)
def test_each_tier_lowers_to_the_next_one_down(model: str, lowered_to: str) -> None:
    narrow = classify(Capability(model, pcie_width_current=8, pcie_width_max=16))
    assert narrow.tier == lowered_to
    assert TIERS.index(narrow.tier) == TIERS.index(model_tier(model)) + 1
