"""PCIe rates from NVML's byte counters: 32-bit counters that wrap, read off the
sample path and summed into totals a sample takes its rate from."""

from __future__ import annotations

import pytest

from gpucloud_agent.nvml import PcieRates, counter_delta


def test_a_wrapped_32_bit_counter_still_counts_what_passed() -> None:
    assert counter_delta(100, 4_196, 32) == 4_096
    assert counter_delta(2**32 - 1_000, 3_000, 32) == 4_000  # wrapped once
    assert counter_delta(2**64 - 1, 9, 64) == 10


def test_rates_come_from_two_totals_and_nothing_is_made_up() -> None:
    rates = PcieRates()
    assert rates.update(None) == (None, None)  # the GPU does not count PCIe bytes
    assert rates.update((1_000_000, 0, 0)) == (None, None)  # the first: no rate yet
    tx, rx = rates.update((3_000_000, 4 * 1024 * 1024, 1024 * 1024))  # 2 s later
    assert tx == pytest.approx(2048.0)  # KiB/s
    assert rx == pytest.approx(512.0)
    assert rates.update((3_000_000, 5 * 1024 * 1024, 0)) == (None, None)  # no new reading
