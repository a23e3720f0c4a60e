"""GPU tiers (seed 003): a class by model, lowered when the measured capability
falls short of what that model should deliver. Pure functions.

The tier tells placement and pricing what a GPU can be sold as: a flagship
part on a PCIe link trained at a quarter of its width, or with memory missing,
does not perform like one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

#: Tiers from best to worst.
TIERS = ("flagship", "datacenter", "inference", "workstation", "unclassified")

#: Model names (as NVML or the node label writes them) to a tier. A word of the name
#: matches a model when it is the model, or the model and letters (`A10G`, `L40S`):
#: never the model and more digits (`A1000`, `A4000` and `T400` are workstation cards,
#: not an A100, A40 or T4). First match wins: "L40S" precedes "L40".
_MODELS: tuple[tuple[str, str], ...] = (
    ("GB200", "flagship"),
    ("GH200", "flagship"),
    ("B200", "flagship"),
    ("H200", "flagship"),
    ("H100", "flagship"),
    ("A100", "datacenter"),
    ("L40S", "datacenter"),
    ("L40", "datacenter"),
    ("A800", "datacenter"),
    ("H800", "datacenter"),
    ("A40", "inference"),
    ("A30", "inference"),
    ("A10", "inference"),
    ("L4", "inference"),
    ("T4", "inference"),
    ("RTX", "workstation"),
    ("GEFORCE", "workstation"),
)


@dataclass(frozen=True)
class Capability:
    """What was measured on the GPU (inventory), beside its model name."""

    model: str
    memory_total_mib: float | None = None
    #: The memory the model is sold with, when known (for spotting missing memory).
    expected_memory_mib: float | None = None
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None
    pcie_width_current: int | None = None
    pcie_width_max: int | None = None


@dataclass(frozen=True)
class Classification:
    tier: str
    #: Why it sits below its model's tier; empty when it does not.
    reasons: tuple[str, ...] = field(default_factory=tuple)


def model_tier(model: str) -> str:
    words = re.findall(r"[A-Z0-9]+", model.upper())
    for name, tier in _MODELS:
        if any((word.startswith(name) and word[len(name) :].isalpha()) or word == name
               for word in words):  # fmt: skip
            return tier
    return "unclassified"


def classify(capability: Capability) -> Classification:
    tier = model_tier(capability.model)
    if tier == "unclassified":
        return Classification(tier, ("unknown model",))
    reasons: list[str] = []
    if (
        capability.pcie_width_current is not None
        and capability.pcie_width_max
        and capability.pcie_width_current < capability.pcie_width_max
    ):
        reasons.append(
            f"PCIe link x{capability.pcie_width_current} of x{capability.pcie_width_max}"
        )
    if (
        capability.pcie_gen_current is not None
        and capability.pcie_gen_max
        and capability.pcie_gen_current < capability.pcie_gen_max - 1
    ):
        # One generation down is normal power saving at idle; two is a bad link.
        reasons.append(f"PCIe gen {capability.pcie_gen_current} of {capability.pcie_gen_max}")
    if (
        capability.memory_total_mib is not None
        and capability.expected_memory_mib
        and capability.memory_total_mib < 0.9 * capability.expected_memory_mib
    ):
        reasons.append(
            f"{capability.memory_total_mib:.0f} MiB of {capability.expected_memory_mib:.0f} MiB"
        )
    if reasons:
        tier = TIERS[min(TIERS.index(tier) + 1, len(TIERS) - 1)]
    return Classification(tier, tuple(reasons))
