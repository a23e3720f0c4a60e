"""Which files a `gpucloud cp` may skip: a local file is the stored object when its size
matches and its bytes give the object's ETag, single-part or multipart, for one of the
part sizes worth trying; never on a guess (copies.py)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from gpucloud_cli.copies import (
    MIB,
    StoredObject,
    md5_of_file,
    multipart_etag,
    part_sizes,
    same_content,
)


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def s3_multipart_etag(data: bytes, part_size: int) -> str:
    """The ETag S3 gives `data` uploaded in parts of `part_size`, computed apart."""
    parts = [data[start : start + part_size] for start in range(0, len(data), part_size)]
    digests = b"".join(hashlib.md5(part, usedforsecurity=False).digest() for part in parts)
    return f"{hashlib.md5(digests, usedforsecurity=False).hexdigest()}-{len(parts)}"


def md5(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


# --- digests ---------------------------------------------------------------------------


def test_a_files_md5_is_that_of_its_bytes(tmp_path: Path) -> None:
    data = os.urandom(3 * MIB + 17)  # more than one read
    assert md5_of_file(write(tmp_path / "f", data)) == md5(data)


@pytest.mark.parametrize(("length", "part"), [(10, 4), (12, 4), (1, 4), (9, 1)])
def test_a_multipart_etag_is_the_md5_of_the_parts_md5s_and_their_count(
    tmp_path: Path, length: int, part: int
) -> None:
    data = bytes(range(length))
    assert multipart_etag(write(tmp_path / "f", data), part) == s3_multipart_etag(data, part)


def test_a_file_that_fills_its_last_part_exactly_has_no_empty_part_after_it(
    tmp_path: Path,
) -> None:
    etag = multipart_etag(write(tmp_path / "f", b"abcdefgh"), 4)
    assert etag.endswith("-2")


def test_a_part_larger_than_one_read_is_digested_whole(tmp_path: Path) -> None:
    data = os.urandom(2 * MIB + 5)
    path = write(tmp_path / "f", data)
    assert multipart_etag(path, MIB + MIB // 2) == s3_multipart_etag(data, MIB + MIB // 2)


# --- part sizes worth trying -----------------------------------------------------------


def test_the_part_sizes_tried_are_only_those_that_give_the_count_of_parts() -> None:
    size = 100 * MIB
    assert part_sizes(size, 2) == [64 * MIB, 50 * MIB]  # the service's, an even split
    assert part_sizes(size, 7) == [15 * MIB, 16 * MIB]  # an even split, mc's
    assert part_sizes(size, 13) == [8 * MIB]  # the AWS CLI's
    assert part_sizes(size, 20) == [5 * MIB]  # S3's floor


def test_the_services_own_part_size_is_tried_first_for_a_large_object() -> None:
    size = 200 * 1024 * MIB  # above 64 MiB x 1,000: the service picks larger parts
    (service,) = part_sizes(size, 1000)
    assert service % MIB == 0
    assert -(-size // service) == 1000
    assert service > 64 * MIB


def test_a_count_no_candidate_gives_yields_nothing_to_try() -> None:
    assert part_sizes(100 * MIB, 3) == [34 * MIB]  # only the even split
    assert part_sizes(10 * MIB, 9999) == []


# --- same content ----------------------------------------------------------------------


def test_a_file_with_the_objects_size_and_md5_is_the_same(tmp_path: Path) -> None:
    data = b"weights" * 1000
    path = write(tmp_path / "f", data)
    assert same_content(path, StoredObject("k", len(data), md5(data)))
    # ETags are listed quoted, and hex may come in capitals.
    assert same_content(path, StoredObject("k", len(data), f'"{md5(data).upper()}"'))


def test_a_file_of_another_size_is_not_the_same_whatever_the_etag(tmp_path: Path) -> None:
    data = b"weights"
    path = write(tmp_path / "f", data)
    assert not same_content(path, StoredObject("k", len(data) + 1, md5(data)))


def test_a_file_with_the_size_but_other_bytes_is_not_the_same(tmp_path: Path) -> None:
    path = write(tmp_path / "f", b"weights")
    assert not same_content(path, StoredObject("k", 7, md5(b"WEIGHTS")))


def test_a_missing_file_or_a_directory_is_not_the_object(tmp_path: Path) -> None:
    stored = StoredObject("k", 0, md5(b""))
    assert not same_content(tmp_path / "absent", stored)
    assert not same_content(tmp_path, stored)
    assert same_content(write(tmp_path / "empty", b""), stored)


def test_a_multipart_object_is_matched_with_a_common_tools_part_size(tmp_path: Path) -> None:
    data = os.urandom(6 * MIB + 3)
    path = write(tmp_path / "f", data)
    stored = StoredObject("k", len(data), s3_multipart_etag(data, 5 * MIB))
    assert same_content(path, stored)


def test_a_multipart_object_split_evenly_into_its_parts_is_matched(tmp_path: Path) -> None:
    data = os.urandom(6 * MIB + 3)  # two parts of 4 MiB: whole mebibytes, split evenly
    path = write(tmp_path / "f", data)
    assert same_content(path, StoredObject("k", len(data), s3_multipart_etag(data, 4 * MIB)))


def test_a_multipart_object_of_a_part_size_no_tool_uses_is_copied_again(tmp_path: Path) -> None:
    """Parts of 2.5 MiB also make three parts of this file, but neither this CLI nor a
    common tool uses them (an even split would be 3 MiB): the digest never matches, so
    the file is sent rather than skipped on a guess."""
    data = os.urandom(6 * MIB + 3)
    path = write(tmp_path / "f", data)
    stored = StoredObject("k", len(data), s3_multipart_etag(data, 5 * MIB // 2))
    assert stored.etag.endswith("-3")
    assert not same_content(path, stored)
    assert same_content(path, StoredObject("k", len(data), s3_multipart_etag(data, 3 * MIB)))


def test_an_etag_that_is_no_md5_is_never_a_match(tmp_path: Path) -> None:
    path = write(tmp_path / "f", b"abc")
    assert not same_content(path, StoredObject("k", 3, "0123456789abcdef-x"))  # no count
    assert not same_content(path, StoredObject("k", 3, "kms-encrypted-etag"))
