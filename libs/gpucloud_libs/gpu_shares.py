"""Whole GPUs and shared ones: what a spec asks the device plugin for, and what it weighs.

NVIDIA's device plugin advertises three kinds of GPU resource on a node:
- `nvidia.com/gpu`: whole GPUs;
- `nvidia.com/mig-<profile>` (the mixed MIG strategy): MIG instances, each a fenced
  part of one GPU, for example `nvidia.com/mig-1g.5gb`;
- `nvidia.com/gpu.shared` (time-slicing with `renameByDefault`): replicas of a GPU
  that take turns on it, `replicas` per GPU, with no memory isolation between them.

A workload holds `units` of one of them. Its *weight* is the part of a GPU one unit
is: 1 for a whole GPU, g/7 for a MIG profile of g compute slices out of the seven of
an A100, H100 or H200, 1/replicas for a time-sliced replica. Metering reports GPU time
at that weight; quota counts a workload's weighted units rounded up to whole GPUs.

The instances service stores a workload's resource and weight with it, and says both
in its lifecycle events, so that metering needs no spec to weigh its time.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

from .naming import GPU_RESOURCE

MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
SHARED_GPU_RESOURCE = "nvidia.com/gpu.shared"
#: A MIG profile as the device plugin names it: compute slices, then memory.
MIG_PROFILE = r"^[1-7]g\.[0-9]{1,3}gb(\+me)?$"
#: The compute slices of a whole A100, H100 or H200; a MIG profile's `<g>g` is out of these.
MIG_COMPUTE_SLICES = 7
#: The most replicas a spec may share one GPU among by time-slicing: with MIG's seven,
#: the most pods one GPU of quota may stand for.
MAX_TIME_SLICING_REPLICAS = 64
#: Pods on time-sliced GPUs carry it, so that a node's replicas serve one tenant.
SHARING_LABEL = "gpucloud.io/gpu-sharing"

Sharing = Literal["none", "mig", "time-sliced"]


@dataclass(frozen=True)
class GpuShare:
    """The GPU resource a workload's pods request, and the part of a GPU one unit is."""

    resource: str = GPU_RESOURCE
    weight: Fraction = Fraction(1)

    @classmethod
    def whole(cls) -> GpuShare:
        return _WHOLE

    @classmethod
    def mig(cls, profile: str) -> GpuShare:
        if not re.match(MIG_PROFILE, profile):
            raise ValueError(f"{profile!r} is not a MIG profile such as 1g.5gb")
        compute = int(profile.partition("g")[0])
        return cls(MIG_RESOURCE_PREFIX + profile, Fraction(compute, MIG_COMPUTE_SLICES))

    @classmethod
    def replica(cls, replicas: int) -> GpuShare:
        if replicas < 2:
            raise ValueError("a time-sliced GPU has 2 replicas or more")
        return cls(SHARED_GPU_RESOURCE, Fraction(1, replicas))

    @classmethod
    def of(cls, doc: Any) -> GpuShare:
        """From a stored workload or spec; documents from before shared GPUs hold whole ones.
        (The admission pass reads thousands a second: whole GPUs skip the fraction.)"""
        resource, weight = doc.get("gpu_resource"), doc.get("gpu_weight")
        if resource in (None, GPU_RESOURCE) and weight in (None, "1"):
            return _WHOLE
        return cls(resource or GPU_RESOURCE, Fraction(weight or 1))

    @property
    def sharing(self) -> Sharing:
        if self.resource == SHARED_GPU_RESOURCE:
            return "time-sliced"
        return "mig" if self.resource.startswith(MIG_RESOURCE_PREFIX) else "none"

    @property
    def time_sliced(self) -> bool:
        """Its GPUs are shared without memory isolation: one tenant per node at a time."""
        return self.resource == SHARED_GPU_RESOURCE

    def quota_gpus(self, units: int) -> int:
        """Whole GPUs of quota that `units` hold: their weight, rounded up."""
        if self.weight.denominator == 1:
            return units * self.weight.numerator
        return math.ceil(units * self.weight)

    def capacity_key(self, gpu_type: str) -> str:
        """The pool a unit comes from: whole GPUs by product; a shared kind apart."""
        if self.resource == GPU_RESOURCE:
            return gpu_type
        return f"{gpu_type} {self.resource.removeprefix('nvidia.com/')}"


_WHOLE = GpuShare()


def is_gpu_resource(name: str) -> bool:
    """Whether a node or pod resource name is one of the three kinds above."""
    return name in (GPU_RESOURCE, SHARED_GPU_RESOURCE) or name.startswith(MIG_RESOURCE_PREFIX)


def gpu_units(amounts: dict[str, Any]) -> dict[str, int]:
    """The GPU resources among a node's allocatable or a container's requests."""
    return {name: int(value) for name, value in amounts.items() if is_gpu_resource(name)}
