"""What the storage API accepts and how it answers: the request models' bounds and the
camelCase names on the wire (schemas.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from gpucloud_storage.schemas import (
    MAX_BATCH_URLS,
    MAX_OBJECT_BYTES,
    MAX_STORAGE_BYTES,
    MIB,
    AccessorCreate,
    AttachmentRequest,
    DownloadRequest,
    PartUrl,
    PartUrlsRequest,
    Storage,
    StorageCreate,
    StorageUpdate,
    UploadComplete,
    UploadPlan,
    UploadRequest,
    UploadUrlsRequest,
)

AT = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


def refusals(model: type[BaseModel], body: dict[str, Any]) -> list[tuple[tuple[Any, ...], str]]:
    """(where, why) of each field the model refuses in `body`; empty when it takes it."""
    try:
        model.model_validate(body)
    except ValidationError as error:
        return [(tuple(item["loc"]), item["type"]) for item in error.errors()]
    return []


def storage(**fields: Any) -> dict[str, Any]:
    return {"kind": "object", "sizeBytes": MIB, **fields}


# --- creating and changing storages ----------------------------------------------------


@pytest.mark.parametrize("storage_id", ["a", "models", "v1-data", "0", "a" * 40])
def test_a_storage_id_of_lowercase_letters_digits_and_inner_dashes_is_taken(
    storage_id: str,
) -> None:
    assert refusals(StorageCreate, storage(storageID=storage_id)) == []


@pytest.mark.parametrize("storage_id", ["", "-a", "a-", "Models", "a_b", "a.b", "a" * 41])
def test_a_storage_id_that_is_no_dns_label_is_refused(storage_id: str) -> None:
    assert refusals(StorageCreate, storage(storageID=storage_id)) == [
        (("storageID",), "string_pattern_mismatch")
    ]


def test_a_storage_holds_from_one_mebibyte_to_one_pebibyte() -> None:
    assert refusals(StorageCreate, storage(sizeBytes=MIB)) == []
    assert refusals(StorageCreate, storage(sizeBytes=MAX_STORAGE_BYTES)) == []
    assert refusals(StorageCreate, storage(sizeBytes=MIB - 1)) == [
        (("sizeBytes",), "greater_than_equal")
    ]
    assert refusals(StorageCreate, storage(sizeBytes=MAX_STORAGE_BYTES + 1)) == [
        (("sizeBytes",), "less_than_equal")
    ]
    assert MAX_STORAGE_BYTES == 1024**5


def test_a_new_storage_defaults_to_an_unnamed_read_write_once_with_no_class() -> None:
    body = StorageCreate.model_validate({"kind": "volume", "sizeBytes": 5 * MIB})
    assert (body.storage_id, body.name, body.storage_class, body.access_mode) == (
        None, None, None, "ReadWriteOnce",
    )  # fmt: skip


def test_a_storage_class_must_be_a_dns_name_and_the_mode_a_known_one() -> None:
    assert refusals(StorageCreate, storage(storageClass="fast-nvme.v2")) == []
    assert refusals(StorageCreate, storage(storageClass="Fast")) == [
        (("storageClass",), "string_pattern_mismatch")
    ]
    assert refusals(StorageCreate, storage(accessMode="ReadOnlyMany")) == [
        (("accessMode",), "literal_error")
    ]


def test_a_field_the_api_does_not_know_is_refused_rather_than_dropped() -> None:
    assert refusals(StorageCreate, storage(bucket="someone-elses")) == [
        (("bucket",), "extra_forbidden")
    ]


def test_a_nul_character_in_a_name_is_refused() -> None:
    assert refusals(StorageCreate, storage(name="a\x00b")) == [(("name",), "value_error")]


def test_fields_are_taken_by_their_python_names_too() -> None:
    body = StorageCreate.model_validate({"kind": "object", "size_bytes": MIB, "storage_id": "x"})
    assert (body.storage_id, body.size_bytes) == ("x", MIB)


def test_an_update_may_change_nothing_and_keeps_the_creation_bounds() -> None:
    assert StorageUpdate.model_validate({}).model_dump() == {"name": None, "size_bytes": None}
    assert refusals(StorageUpdate, {"sizeBytes": MIB - 1}) == [
        (("sizeBytes",), "greater_than_equal")
    ]


# --- accessors -------------------------------------------------------------------------


def test_an_accessor_is_read_only_unless_asked_and_its_end_needs_a_time_zone() -> None:
    assert AccessorCreate.model_validate({}).mode == "read-only"
    assert refusals(AccessorCreate, {"expiresAt": "2030-01-01T00:00:00"}) == [
        (("expiresAt",), "timezone_aware")
    ]
    taken = AccessorCreate.model_validate({"expiresAt": "2030-01-01T00:00:00Z"})
    assert taken.expires_at == datetime(2030, 1, 1, tzinfo=UTC)


# --- transfers -------------------------------------------------------------------------


def test_an_object_key_is_one_to_1024_characters() -> None:
    assert refusals(DownloadRequest, {"key": "k" * 1024}) == []
    assert refusals(DownloadRequest, {"key": ""}) == [(("key",), "string_too_short")]
    assert refusals(DownloadRequest, {"key": "k" * 1025}) == [(("key",), "string_too_long")]


def test_an_object_key_is_at_most_1024_bytes_of_utf_8_as_s3_counts_it() -> None:
    """`é` is two bytes: 512 of them fit, 513 are refused here rather than by the store."""
    assert refusals(DownloadRequest, {"key": "é" * 512}) == []
    assert refusals(DownloadRequest, {"key": "é" * 513}) == [(("key",), "value_error")]


def test_an_upload_url_lasts_a_minute_to_a_week_and_a_download_url_from_a_second() -> None:
    week = 7 * 24 * 3600
    assert refusals(UploadRequest, {"key": "k", "expiresInS": 60}) == []
    assert refusals(UploadRequest, {"key": "k", "expiresInS": 59}) == [
        (("expiresInS",), "greater_than_equal")
    ]
    assert refusals(UploadRequest, {"key": "k", "expiresInS": week + 1}) == [
        (("expiresInS",), "less_than_equal")
    ]
    assert refusals(DownloadRequest, {"key": "k", "expiresInS": 1}) == []
    assert DownloadRequest.model_validate({"key": "k"}).expires_in_s == 3600


def test_an_upload_of_unknown_size_is_allowed_and_a_known_one_is_bounded_by_s3() -> None:
    assert UploadRequest.model_validate({"key": "k"}).size_bytes is None
    assert refusals(UploadRequest, {"key": "k", "sizeBytes": MAX_OBJECT_BYTES}) == []
    assert refusals(UploadRequest, {"key": "k", "sizeBytes": MAX_OBJECT_BYTES + 1}) == [
        (("sizeBytes",), "less_than_equal")
    ]
    assert refusals(UploadRequest, {"key": "k", "sizeBytes": -1}) == [
        (("sizeBytes",), "greater_than_equal")
    ]


def test_a_batch_of_upload_urls_covers_one_to_a_thousand_objects() -> None:
    one = {"key": "a", "sizeBytes": 0}
    assert refusals(UploadUrlsRequest, {"objects": [one] * MAX_BATCH_URLS}) == []
    assert refusals(UploadUrlsRequest, {"objects": []}) == [(("objects",), "too_short")]
    assert refusals(UploadUrlsRequest, {"objects": [one] * (MAX_BATCH_URLS + 1)}) == [
        (("objects",), "too_long")
    ]


def test_part_numbers_are_those_s3_allows_each_named_where_it_is_wrong() -> None:
    assert refusals(PartUrlsRequest, {"partNumbers": [1, 10_000]}) == []
    assert refusals(PartUrlsRequest, {"partNumbers": [0, 5, 10_001]}) == [
        (("partNumbers", 0), "greater_than_equal"),
        (("partNumbers", 2), "less_than_equal"),
    ]
    assert refusals(PartUrlsRequest, {"partNumbers": []}) == [(("partNumbers",), "too_short")]


def test_a_completed_part_needs_an_etag() -> None:
    assert refusals(UploadComplete, {"parts": [{"partNumber": 1, "etag": ""}]}) == [
        (("parts", 0, "etag"), "string_too_short")
    ]
    assert refusals(UploadComplete, {"parts": []}) == [(("parts",), "too_short")]


# --- attachments -----------------------------------------------------------------------


def test_an_instance_attaches_one_to_sixteen_storages_in_a_stay_from_zero() -> None:
    item = {"storageID": "models"}
    body = AttachmentRequest.model_validate({"storages": [item]})
    assert (body.stay, body.storages[0].read_only) == (0, False)
    assert refusals(AttachmentRequest, {"storages": [item] * 17, "stay": -1}) == [
        (("storages",), "too_long"),
        (("stay",), "greater_than_equal"),
    ]


# --- answers ---------------------------------------------------------------------------


def test_a_storage_is_answered_with_the_apis_names() -> None:
    answer = Storage(
        storage_id="models", tenant_id="acme", kind="object", state="ready",
        size_bytes=MIB, used_bytes=10, bucket="gpc-1", created_at=AT, updated_at=AT,
    ).model_dump(by_alias=True, mode="json")  # fmt: skip
    assert answer["storageID"] == "models"
    assert answer["tenantID"] == "acme"
    assert (answer["sizeBytes"], answer["usedBytes"], answer["attachedTo"]) == (MIB, 10, [])
    assert answer["createdAt"] == "2026-11-01T12:00:00Z"


def test_a_multipart_plan_is_answered_with_its_upload_id_and_part_urls() -> None:
    plan = UploadPlan(
        key="big.bin", expires_at=AT, upload_id="u-1", part_size_bytes=64 * MIB,
        parts=[PartUrl(part_number=1, url="https://s3/1"), PartUrl(part_number=2, url="https://s3/2")],
    )  # fmt: skip
    assert plan.model_dump(by_alias=True, mode="json") == {
        "key": "big.bin", "expiresAt": "2026-11-01T12:00:00Z", "url": None,
        "uploadID": "u-1", "partSizeBytes": 64 * MIB,
        "parts": [{"partNumber": 1, "url": "https://s3/1"}, {"partNumber": 2, "url": "https://s3/2"}],
    }  # fmt: skip
