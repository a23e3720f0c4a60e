"""The exactness check's own verdicts: a bill a microsecond short is a violation, and
a run that found no ended workload to check fails rather than passing on nothing."""

from __future__ import annotations

from bench.exactness import (
    Metered,
    Settings,
    Summary,
    TenantReading,
    TenantResult,
    Workload,
    check_tenant,
)

ADMITTED_US = 1_700_000_000_000_000
RAN_US = 90_000_000  # 90 s on 2 GPUs


def _reading(billed: int) -> TenantReading:
    ended = ADMITTED_US + RAN_US
    workload = Workload(
        tenant_id="acme", kind="instance", name="i-1", key="i-1", spec_name="h100-2", gpus=2,
        spans=((ADMITTED_US, ended),), admitted_us=ADMITTED_US, ended_us=ended,
    )  # fmt: skip
    return TenantReading("acme", [workload], {"i-1": Metered(billed)}, ended + 10**9, {})


SETTINGS = Settings(floor_us=0, settle_us=0, weights={})


def test_a_bill_exactly_the_recorded_time_passes() -> None:
    result = check_tenant(_reading(2 * RAN_US), {}, SETTINGS, final=True)
    assert (result.checked["instance"], result.violations) == (1, [])


def test_a_bill_one_microsecond_short_is_a_violation() -> None:
    result = check_tenant(_reading(2 * RAN_US - 1), {}, SETTINGS, final=True)
    [violation] = result.violations
    assert "1 GPU-µs short" in violation.what


def test_a_bill_one_microsecond_over_is_a_violation() -> None:
    result = check_tenant(_reading(2 * RAN_US + 1), {}, SETTINGS, final=True)
    [violation] = result.violations
    assert "1 GPU-µs over" in violation.what


def test_a_run_that_checked_nothing_is_below_the_floor() -> None:
    nothing = Summary(results=[TenantResult("acme")])
    assert "checked 0 ended workloads, fewer than the floor of 1" in (nothing.below_floor(1) or "")
    one = Summary(results=[check_tenant(_reading(2 * RAN_US), {}, SETTINGS, final=True)])
    assert one.below_floor(1) is None
    assert one.below_floor(2) is not None
