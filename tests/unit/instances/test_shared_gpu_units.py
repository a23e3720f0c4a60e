"""A shared GPU's unit is the part of a GPU it is: MIG slices and time-sliced
replicas in quota, in their pools, and in the admission queue."""

from __future__ import annotations

from fractions import Fraction

import pytest

from gpucloud_instances.queue.decision import Queued, TenantShare, decide
from gpucloud_libs.gpu_shares import GpuShare
from gpucloud_metering import ledger

A100 = "NVIDIA-A100-SXM4-40GB"


def test_a_units_weight_is_the_part_of_a_gpu_it_is() -> None:
    assert GpuShare.mig("1g.5gb").weight == Fraction(1, 7)
    assert GpuShare.mig("3g.20gb").resource == "nvidia.com/mig-3g.20gb"
    assert GpuShare.mig("3g.20gb").weight == Fraction(3, 7)
    assert GpuShare.replica(4).weight == Fraction(1, 4)
    # Quota counts whole GPUs: a workload's weighted units, rounded up.
    assert GpuShare.mig("1g.5gb").quota_gpus(1) == 1
    assert GpuShare.mig("1g.5gb").quota_gpus(7) == 1
    assert GpuShare.mig("1g.5gb").quota_gpus(8) == 2
    assert GpuShare.whole().quota_gpus(3) == 3
    # Slices are a pool of their own, apart from the type's whole GPUs.
    assert GpuShare.mig("1g.5gb").capacity_key(A100) == f"{A100} mig-1g.5gb"
    assert GpuShare.whole().capacity_key(A100) == A100
    with pytest.raises(ValueError, match="MIG profile"):
        GpuShare.mig("8g.80gb")


def test_the_queue_counts_slices_against_their_pool_and_weight_against_the_quota() -> None:
    pool = f"{A100} mig-1g.5gb"
    at = ledger.from_us(0)
    queued = [
        # 7 slices of 1/7 hold one GPU of quota; 8 would hold two.
        Queued("a", "t", pool, gpus=1, priority=0, created_at=at, units=7),
        Queued("b", "t", pool, gpus=1, priority=0, created_at=at, units=7),
    ]
    tenants = {"t": TenantShare(max_gpus=2, max_workloads=5, held_gpus=0, held_workloads=0)}

    decision = decide(queued, tenants, free={pool: 10, A100: 8}, capacity={pool: 28, A100: 8})

    # 10 slices free: the first takes 7, the second waits for the pool, not the quota
    # (2 GPUs of quota hold both), and the type's whole GPUs are no help.
    assert decision.admit == ["a"]
    assert decision.waiting["b"].reason == "capacity"
