"""What the usage-record pass looks at (gpucloud_metering.changes), and the minute a
fact mirror refreshes by (gpucloud_metering.mirror.recorded_minute): the first pass
sees everything, later ones only what changed, and a failed pass loses nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from gpucloud_metering.changes import ChangeSet, UsageChanges, by_tenant
from gpucloud_metering.mirror import recorded_minute


def test_the_first_pass_looks_at_everything() -> None:
    changes = ChangeSet()
    changes.add(("t-1", "a"))  # before the first pass: everything is looked at anyway
    assert changes.take() is None


def test_later_passes_see_only_what_changed_since_the_last() -> None:
    changes = ChangeSet()
    changes.take()
    assert changes.take() == set()
    changes.add(("t-1", "a"), ("t-2", "b"))
    changes.add(("t-1", "a"))
    assert changes.take() == {("t-1", "a"), ("t-2", "b")}
    assert changes.take() == set()


def test_a_failed_pass_gives_its_keys_back_with_what_arrived_meanwhile() -> None:
    changes = ChangeSet()
    changes.take()
    changes.add(("t-1", "a"))
    taken = changes.take()
    changes.add(("t-1", "b"))  # arrived while the pass ran
    changes.give_back(taken)
    assert changes.take() == {("t-1", "a"), ("t-1", "b")}


def test_a_failed_full_pass_makes_the_next_one_full_again() -> None:
    changes = ChangeSet()
    taken = changes.take()
    assert taken is None
    changes.add(("t-1", "a"))
    changes.give_back(taken)
    assert changes.take() is None
    # Once that full pass is taken, tracking is by key again.
    changes.give_back({("t-1", "a")})
    assert changes.take() == {("t-1", "a")}


def test_giving_back_into_an_untaken_first_pass_keeps_it_full() -> None:
    changes = ChangeSet()
    changes.give_back({("t-1", "a")})
    assert changes.take() is None


def test_keys_are_grouped_by_tenant() -> None:
    grouped = by_tenant({("t-1", "a"), ("t-1", "b"), ("t-2", "a")})
    assert grouped == {"t-1": {"a", "b"}, "t-2": {"a"}}
    assert by_tenant(set()) == {}


def test_instances_and_storages_are_tracked_apart() -> None:
    changes = UsageChanges()
    changes.instances.take()
    changes.storages.take()
    changes.instances.add(("t-1", "nb-1"))
    assert changes.storages.take() == set()
    assert changes.instances.take() == {("t-1", "nb-1")}
    assert changes.storage_hours_done == {}
    # Each holder has its own sets: two services' changes never mix.
    assert UsageChanges().instances is not changes.instances


# --- the minute a fact is recorded in --------------------------------------------


def test_a_fact_is_keyed_by_the_whole_minute_since_the_epoch() -> None:
    assert recorded_minute(datetime(1970, 1, 1, tzinfo=UTC)) == 0
    assert recorded_minute(datetime(1970, 1, 1, 0, 0, 59, 999999, tzinfo=UTC)) == 0
    assert recorded_minute(datetime(1970, 1, 1, 0, 1, tzinfo=UTC)) == 1
    assert recorded_minute(datetime(2026, 3, 1, tzinfo=UTC)) == 29_538_720


def test_the_same_instant_in_any_zone_is_the_same_minute() -> None:
    utc = datetime(2026, 3, 1, 12, 30, 15, tzinfo=UTC)
    tokyo = utc.astimezone(timezone(timedelta(hours=9)))
    assert recorded_minute(tokyo) == recorded_minute(utc)


def test_consecutive_minutes_have_consecutive_keys() -> None:
    start = datetime(2026, 12, 31, 23, 58, 30, tzinfo=UTC)
    keys = [recorded_minute(start + timedelta(seconds=30 * n)) for n in range(6)]
    assert keys == [keys[0], keys[0] + 1, keys[0] + 1, keys[0] + 2, keys[0] + 2, keys[0] + 3]
