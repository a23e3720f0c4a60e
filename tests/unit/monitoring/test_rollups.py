"""Roll-ups of samples into minute and hour windows (rollup.py): where windows begin,
what one window's document holds, which samples close a window or are dropped, and
when a quiet GPU's window is written."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from gpucloud_monitoring.documents import RollupDoc
from gpucloud_monitoring.rollup import Rollup, window_start

from .samples import T0, at, sample


def only(docs: list[RollupDoc]) -> RollupDoc:
    assert len(docs) == 1, docs
    return docs[0]


@pytest.mark.parametrize(
    ("moment", "width", "start"),
    [
        (at(0), 60, at(0)),
        (at(59.999), 60, at(0)),
        (at(60), 60, at(60)),
        (at(125), 60, at(120)),
        (at(3599), 3600, at(0)),
        (at(3600), 3600, at(3600)),
        (
            datetime(2026, 11, 1, 14, 0, 30, tzinfo=UTC),
            60,
            datetime(2026, 11, 1, 14, 0, tzinfo=UTC),
        ),
    ],
)
def test_a_window_begins_on_a_whole_multiple_of_its_width(
    moment: datetime, width: int, start: datetime
) -> None:

    assert window_start(moment, width) == start


def test_a_window_begins_in_utc_whatever_the_samples_zone() -> None:
    paris = datetime(2026, 11, 1, 14, 0, 42, tzinfo=timezone(timedelta(hours=1)))
    begun = window_start(paris, 60)
    assert begun == datetime(2026, 11, 1, 13, 0, tzinfo=UTC)
    assert begun.tzinfo == UTC


def test_a_window_averages_and_maximises_each_series() -> None:
    rollup = Rollup(60)
    for second, utilisation, temperature in [(0, 10.0, 60.0), (20, 20.0, 71.0), (40, 20.0, 65.0)]:
        rollup.add("n1", sample(second, utilization_gpu_pct=utilisation, temperature_c=temperature))
    doc = only(rollup.add("n1", sample(60)))
    assert doc["samples"] == 3
    assert doc["utilization_gpu_pct_avg"] == 16.667  # rounded to three places
    assert doc["utilization_gpu_pct_max"] == 20.0
    assert doc["temperature_c_avg"] == 65.333
    assert doc["temperature_c_max"] == 71.0
    assert (doc["power_w_avg"], doc["power_w_max"]) == (300.0, 300.0)
    assert (doc["start"], doc["width_s"], doc["node"]) == (at(0), 60, "n1")


def test_error_counters_keep_their_highest_and_xids_are_listed_as_reported() -> None:
    rollup = Rollup(60)
    rollup.add("n1", sample(0, ecc_corrected=7, ecc_uncorrected=1, xid_errors=(13,)))
    rollup.add("n1", sample(1, ecc_corrected=9, ecc_uncorrected=1, xid_errors=(79, 13)))
    rollup.add("n1", sample(2, ecc_corrected=8, ecc_uncorrected=2, memory_total_mib=40_000.0))
    doc = only(rollup.add("n1", sample(60)))
    assert (doc["ecc_corrected"], doc["ecc_uncorrected"]) == (9, 2)
    assert doc["xids"] == [13, 79, 13]
    assert doc["memory_total_mib"] == 40_000.0  # the last reading


def test_a_document_id_names_the_gpu_the_window_and_its_user() -> None:
    rollup = Rollup(60)
    rollup.add("n1", sample(0, tenant_id="t-a", instance_id="nb-1"))
    rollup.add("n1", sample(1))  # the same GPU, between two instances
    docs = rollup.add("n1", sample(60))
    epoch = int(T0.timestamp())
    assert sorted(doc["_id"] for doc in docs) == [
        f"GPU-1@{epoch}#-/-",
        f"GPU-1@{epoch}#t-a/nb-1",
    ]
    owned = next(doc for doc in docs if doc["tenant_id"] == "t-a")
    assert (owned["instance_id"], owned["samples"]) == ("nb-1", 1)


def test_a_slice_of_a_shared_gpu_names_its_physical_gpu() -> None:
    rollup = Rollup(60)
    rollup.add("n1", sample(0, gpu_uuid="MIG-1", parent_gpu_uuid="GPU-1", slice="1g.10gb"))
    doc = only(rollup.add("n1", sample(60, gpu_uuid="MIG-1", parent_gpu_uuid="GPU-1")))
    assert (doc["gpu_uuid"], doc["parent_gpu_uuid"]) == ("MIG-1", "GPU-1")


def test_each_gpus_windows_close_on_its_own_samples() -> None:
    rollup = Rollup(60)
    rollup.add("n1", sample(0, gpu_uuid="GPU-1"))
    rollup.add("n1", sample(0, gpu_uuid="GPU-2", index=1))
    # GPU-2 moves on to the next minute: GPU-1's window stays open.
    assert [d["gpu_uuid"] for d in rollup.add("n1", sample(61, gpu_uuid="GPU-2", index=1))] == [
        "GPU-2"
    ]
    assert [d["gpu_uuid"] for d in rollup.add("n1", sample(62, gpu_uuid="GPU-1"))] == ["GPU-1"]


def test_a_new_window_closes_the_old_one_of_every_user_of_the_gpu() -> None:
    rollup = Rollup(60)
    rollup.add("n1", sample(0, tenant_id="a", instance_id="i"))
    rollup.add("n1", sample(10, tenant_id="b", instance_id="j"))
    rollup.add("n1", sample(20, tenant_id="a", instance_id="i"))
    closed = rollup.add("n1", sample(70, tenant_id="c", instance_id="k"))
    assert sorted((d["tenant_id"], d["samples"]) for d in closed) == [("a", 2), ("b", 1)]


def test_a_gap_in_samples_writes_no_empty_windows() -> None:
    rollup = Rollup(60)
    rollup.add("n1", sample(0))
    closed = rollup.add("n1", sample(300))
    assert [d["start"] for d in closed] == [at(0)]
    assert [d["start"] for d in rollup.add("n1", sample(360))] == [at(300)]


def test_a_late_sample_of_a_window_already_written_is_dropped() -> None:
    rollup = Rollup(60)
    rollup.add("n1", sample(0, utilization_gpu_pct=10.0))
    assert len(rollup.add("n1", sample(61, utilization_gpu_pct=90.0))) == 1
    assert rollup.add("n1", sample(30, utilization_gpu_pct=0.0)) == []  # late
    doc = only(rollup.add("n1", sample(121)))
    assert (doc["start"], doc["samples"], doc["utilization_gpu_pct_avg"]) == (at(60), 1, 90.0)


def test_a_quiet_gpus_window_is_flushed_once_and_not_before_it_ends() -> None:
    rollup = Rollup(60)
    rollup.add("n1", sample(10))
    assert rollup.flush_before(at(59.9)) == []  # the window is still running
    doc = only(rollup.flush_before(at(150)))  # nothing for a whole window since
    assert (doc["start"], doc["samples"]) == (at(0), 1)
    assert rollup.flush_before(at(600)) == []  # written once


def test_a_window_just_ended_is_not_flushed_before_its_last_samples_arrive() -> None:
    """Flushed only once a whole window has passed after it: a sample stamped inside it
    that arrives a moment after its end still counts, once."""
    rollup = Rollup(60)
    rollup.add("n1", sample(59.9, utilization_gpu_pct=10.0))
    assert rollup.flush_before(at(60.0)) == []
    rollup.add("n1", sample(59.95, utilization_gpu_pct=30.0))  # on its way at the flush
    doc = only(rollup.flush_before(at(120.0)))
    assert (doc["start"], doc["samples"], doc["utilization_gpu_pct_avg"]) == (at(0), 2, 20.0)
    assert rollup.add("n1", sample(59.99)) == []  # written: too late now
    assert rollup.flush_before(at(600)) == []


def test_a_flush_keeps_the_windows_still_open() -> None:
    rollup = Rollup(60)
    rollup.add("n1", sample(0, gpu_uuid="GPU-quiet"))
    rollup.add("n1", sample(125, gpu_uuid="GPU-busy"))
    docs = rollup.flush_before(at(130))
    assert [d["gpu_uuid"] for d in docs] == ["GPU-quiet"]
    # GPU-busy's minute (120-180 s) is written by its own next sample, not lost.
    assert [d["start"] for d in rollup.add("n1", sample(181, gpu_uuid="GPU-busy"))] == [at(120)]


def test_a_gpu_that_reports_again_after_a_flush_opens_a_fresh_window() -> None:
    rollup = Rollup(60)
    rollup.add("n1", sample(0, temperature_c=80.0))
    rollup.flush_before(at(600))
    rollup.add("n1", sample(600, temperature_c=40.0))
    doc = only(rollup.add("n1", sample(660)))
    assert (doc["start"], doc["temperature_c_max"]) == (at(600), 40.0)


def test_an_hour_rollup_gathers_the_whole_hour() -> None:
    rollup = Rollup(3600)
    for minute in range(60):
        assert rollup.add("n1", sample(minute * 60, power_w=float(minute))) == []
    doc = only(rollup.add("n1", sample(3600)))
    assert (doc["samples"], doc["power_w_avg"], doc["power_w_max"]) == (60, 29.5, 59.0)
    assert doc["width_s"] == 3600
