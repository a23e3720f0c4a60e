"""Time as services store and show it (gpucloud_libs.clock): aware UTC datetimes,
and instants cut to the millisecond exactly as the store keeps them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from gpucloud_libs.clock import (
    as_stored,
    as_stored_values,
    aware,
    aware_or_none,
    now,
    now_as_stored,
)


def test_now_is_aware_utc_and_now_as_stored_has_whole_milliseconds() -> None:
    assert now().tzinfo is UTC
    stored = now_as_stored()
    assert (stored.tzinfo, stored.microsecond % 1000) == (UTC, 0)


def test_a_stored_instant_keeps_the_millisecond_and_drops_the_rest() -> None:
    at = datetime(2026, 3, 1, 12, 0, 0, 123_999, tzinfo=UTC)
    assert as_stored(at) == datetime(2026, 3, 1, 12, 0, 0, 123_000, tzinfo=UTC)
    # Truncated, never rounded up into the next millisecond (or second).
    assert as_stored(datetime(2026, 3, 1, 23, 59, 59, 999_999, tzinfo=UTC)).second == 59


def test_storing_twice_changes_nothing_more() -> None:
    at = datetime(2026, 3, 1, 12, 0, 0, 987_654, tzinfo=UTC)
    assert as_stored(as_stored(at)) == as_stored(at)


def test_storing_keeps_the_zone_of_the_instant() -> None:
    paris = timezone(timedelta(hours=1))
    at = datetime(2026, 3, 1, 12, 0, 0, 500_500, tzinfo=paris)
    assert as_stored(at).tzinfo is paris
    assert as_stored(at) == at - timedelta(microseconds=500)


def test_a_naive_datetime_read_from_the_store_is_taken_as_utc() -> None:
    naive = datetime(2026, 3, 1, 12, 0)
    assert aware(naive) == datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    assert aware(naive).tzinfo is UTC


def test_an_aware_datetime_is_left_as_it_is() -> None:
    tokyo = datetime(2026, 3, 1, 21, 0, tzinfo=timezone(timedelta(hours=9)))
    assert aware(tokyo) is tokyo


def test_an_unset_datetime_stays_unset() -> None:
    assert aware_or_none(None) is None
    assert aware_or_none(datetime(2026, 3, 1)) == datetime(2026, 3, 1, tzinfo=UTC)


def test_a_stored_naive_instant_compares_with_now() -> None:
    """What a store hands back and `now()` can be subtracted once made aware."""
    stored = now().replace(tzinfo=None)
    assert timedelta(0) <= now() - aware(stored) < timedelta(seconds=5)


def test_a_document_kept_in_memory_holds_its_instants_as_the_store_will() -> None:
    at = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
    kept = as_stored_values(
        {"created_at": at, "history": [{"state": "pending", "at": at}], "sequence": 1}
    )
    cut = at.replace(microsecond=123000)
    assert kept == {"created_at": cut, "history": [{"state": "pending", "at": cut}], "sequence": 1}
