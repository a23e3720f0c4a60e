"""Request and response models of the specs API."""

from __future__ import annotations

from datetime import datetime
from typing import Self

from pydantic import (
    Field,
    model_validator,
)

from gpucloud_libs.gpu_shares import MAX_TIME_SLICING_REPLICAS, MIG_PROFILE, GpuShare, Sharing
from gpucloud_libs.http import ApiModel

from ..schemas import DnsLabel, LabelValue, Quantity


class SpecCreate(ApiModel):
    name: DnsLabel
    cpu: Quantity
    memory: Quantity
    #: The `nvidia.com/gpu.product` its nodes carry (time-sliced nodes: `<product>-SHARED`).
    gpu_type: LabelValue
    #: Whole GPUs, MIG instances or time-sliced replicas, per pod.
    gpu_num: int = Field(ge=1, le=16)
    zones: list[LabelValue] = Field(default_factory=list, max_length=16)
    #: `none`: whole GPUs; `mig`: MIG instances of `migProfile`; `time-sliced`: one
    #: replica of a GPU the device plugin shares `timeSlicingReplicas` ways.
    gpu_sharing: Sharing = "none"
    mig_profile: str | None = Field(default=None, pattern=MIG_PROFILE)
    time_slicing_replicas: int | None = Field(default=None, ge=2, le=MAX_TIME_SLICING_REPLICAS)

    @model_validator(mode="after")
    def _sharing_is_complete(self) -> Self:
        if (self.gpu_sharing == "mig") != (self.mig_profile is not None):
            raise ValueError("migProfile is given exactly when gpuSharing is mig")
        if (self.gpu_sharing == "time-sliced") != (self.time_slicing_replicas is not None):
            raise ValueError("timeSlicingReplicas is given exactly when gpuSharing is time-sliced")
        if self.gpu_sharing == "time-sliced" and self.gpu_num != 1:
            # More replicas of one GPU give a pod no more of it, only a bigger bill.
            raise ValueError("a time-sliced spec asks for gpuNum 1")
        return self

    def share(self) -> GpuShare:
        if self.mig_profile is not None:
            return GpuShare.mig(self.mig_profile)
        if self.time_slicing_replicas is not None:
            return GpuShare.replica(self.time_slicing_replicas)
        return GpuShare.whole()


class Spec(SpecCreate):
    #: The resource its pods request, e.g. `nvidia.com/mig-1g.5gb`.
    gpu_resource: str
    #: The part of a GPU one of its units is, exactly (`1`, `1/7`, `1/4`): usage is
    #: reported at this weight, and its price is per unit-hour.
    gpu_weight: str
    created_at: datetime
