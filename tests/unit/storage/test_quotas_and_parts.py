"""What a storage holds of its tenant's quota, what fits a storage's own quota, and how
a large object is cut into parts for a multipart upload (storages.py, transfers.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpucloud_libs.errors import QuotaExceeded
from gpucloud_storage.documents import StorageDoc
from gpucloud_storage.schemas import MAX_OBJECT_BYTES
from gpucloud_storage.storages import held_bytes
from gpucloud_storage.transfers import (
    MAX_PART_BYTES,
    MAX_PLANNED_PARTS,
    _within_quota,
    part_size,
)

AT = datetime(2026, 11, 1, tzinfo=UTC)
MIB = 1024 * 1024
GIB = 1024 * MIB
FLOOR = 64 * MIB


def storage(size_bytes: int, reservations: dict[str, int] | None = None) -> StorageDoc:
    doc: StorageDoc = {
        "_id": "acme/models", "tenant_id": "acme", "storage_id": "models", "name": None,
        "kind": "object", "state": "ready", "message": None, "size_bytes": size_bytes,
        "created_by": "u-1", "created_at": AT, "updated_at": AT, "bucket": "gpc-0123",
    }  # fmt: skip
    if reservations is not None:
        doc["reservations"] = reservations
    return doc


def parts_needed(size_bytes: int, part_bytes: int) -> int:
    return -(-size_bytes // part_bytes)


# --- held_bytes ------------------------------------------------------------------------


def test_a_storage_without_resizes_in_flight_holds_its_size() -> None:
    assert held_bytes(storage(10 * GIB)) == 10 * GIB
    assert held_bytes(storage(10 * GIB, reservations={})) == 10 * GIB


def test_a_larger_resize_in_flight_holds_its_new_size_until_it_is_applied() -> None:
    assert held_bytes(storage(10 * GIB, {"r-1": 25 * GIB})) == 25 * GIB


def test_a_shrinking_resize_in_flight_still_holds_the_current_size() -> None:
    """A bucket's quota cut to 2 GiB may yet fail: until then it may hold all 10."""
    assert held_bytes(storage(10 * GIB, {"r-1": 2 * GIB})) == 10 * GIB


def test_of_several_resizes_in_flight_the_largest_is_held() -> None:
    doc = storage(10 * GIB, {"r-1": 12 * GIB, "r-2": 30 * GIB, "r-3": 11 * GIB})
    assert held_bytes(doc) == 30 * GIB


# --- a storage's own quota -------------------------------------------------------------


def test_an_object_exactly_the_storages_size_fits() -> None:
    _within_quota(storage(100 * MIB), 100 * MIB, "the object")  # raises nothing


def test_one_byte_over_the_storages_size_is_refused_naming_both_sizes() -> None:
    with pytest.raises(QuotaExceeded) as refused:
        _within_quota(storage(100 * MIB), 100 * MIB + 1, "the objects")
    assert str(refused.value.detail) == (
        f"the objects ({100 * MIB + 1} bytes) would not fit the storage's quota ({100 * MIB} bytes)"
    )


# --- part sizes ------------------------------------------------------------------------


def test_an_object_the_floor_cuts_into_at_most_the_planned_parts_keeps_the_floor() -> None:
    at_limit = FLOOR * MAX_PLANNED_PARTS
    assert part_size(at_limit, FLOOR) == FLOOR
    assert part_size(FLOOR + 1, FLOOR) == FLOOR
    assert part_size(1, FLOOR) == FLOOR


def test_one_byte_past_the_floors_reach_takes_the_next_whole_mebibyte() -> None:
    size = part_size(FLOOR * MAX_PLANNED_PARTS + 1, FLOOR)
    assert size == FLOOR + MIB
    assert parts_needed(FLOOR * MAX_PLANNED_PARTS + 1, size) <= MAX_PLANNED_PARTS


@pytest.mark.parametrize("size_bytes", [100 * GIB, 333 * GIB + 7, 4 * 1024 * GIB + 12_345])
def test_a_large_object_gets_whole_mebibyte_parts_that_fit_one_plan(size_bytes: int) -> None:
    size = part_size(size_bytes, FLOOR)
    assert size % MIB == 0
    assert parts_needed(size_bytes, size) <= MAX_PLANNED_PARTS
    # The smallest such part: one mebibyte less would need more parts than a plan lists.
    assert size == FLOOR or parts_needed(size_bytes, size - MIB) > MAX_PLANNED_PARTS


def test_the_largest_object_one_plan_takes_is_a_thousand_of_the_largest_parts() -> None:
    """S3 allows 5 GiB parts; a plan lists 1,000 of them, so 5,000 GiB is the most one
    multipart upload planned here can carry."""
    largest = MAX_PLANNED_PARTS * MAX_PART_BYTES
    assert part_size(largest, FLOOR) == MAX_PART_BYTES
    assert part_size(largest + 1, FLOOR) > MAX_PART_BYTES
    # So an object the API's schema admits (up to S3's 5 TiB) may still be refused.
    assert largest < MAX_OBJECT_BYTES


def test_a_floor_above_what_the_size_needs_is_kept() -> None:
    assert part_size(10 * GIB, 256 * MIB) == 256 * MIB
