"""The parts of a copy that need no object store: where a downloaded object lands (and
which keys are refused), how a tree is walked and batched, how the work runs bounded,
and the journal that lets an interrupted upload resume (gpucloud_client transfers.py)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpucloud_client import Client, TransferFailed, Transfers
from gpucloud_client.transfers import _s3_code, batched, local_path, run_bounded, tally, walk


def tree(root: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


# --- where objects land ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "relative"),
    [("a/b.txt", "a/b.txt"), ("/a", "a"), ("a//b", "a/b"), ("./a", "a"), ("a/./b", "a/b")],
)
def test_an_object_lands_under_the_root_at_its_key(tmp_path: Path, key: str, relative: str) -> None:
    assert local_path(tmp_path, key) == tmp_path / relative


@pytest.mark.parametrize("key", ["", "/", "..", "../etc/passwd", "a/../../b", "a/.."])
def test_a_key_that_names_nothing_or_climbs_out_is_refused(tmp_path: Path, key: str) -> None:
    with pytest.raises(TransferFailed, match="refusing to write the object"):
        local_path(tmp_path, key)


# --- walking and batching --------------------------------------------------------------


def test_a_walk_finds_every_regular_file_at_any_depth(tmp_path: Path) -> None:
    root = tree(tmp_path / "data", {"a.txt": b"1", "sub/b.txt": b"22", "sub/deep/c": b"333"})
    (root / "empty").mkdir()
    found = sorted(path.relative_to(root).as_posix() for path in walk(root))
    assert found == ["a.txt", "sub/b.txt", "sub/deep/c"]


def test_a_walk_follows_no_symbolic_link(tmp_path: Path) -> None:
    outside = tree(tmp_path / "outside", {"secret": b"x"})
    root = tree(tmp_path / "data", {"a": b"1"})
    (root / "link-dir").symlink_to(outside, target_is_directory=True)
    (root / "link-file").symlink_to(outside / "secret")
    assert [path.name for path in walk(root)] == ["a"]


def test_a_tally_counts_the_files_and_their_bytes(tmp_path: Path) -> None:
    counted = tally(tree(tmp_path, {"a": b"12345", "b/c": b"678", "b/d": b""}))
    assert (counted.files, counted.bytes) == (3, 8)


def test_batches_are_full_but_the_last() -> None:
    assert list(batched(range(7), 3)) == [[0, 1, 2], [3, 4, 5], [6]]
    assert list(batched(range(6), 3)) == [[0, 1, 2], [3, 4, 5]]
    assert list(batched([], 3)) == []


def test_batches_pull_items_only_as_they_are_needed() -> None:
    pulled: list[int] = []

    def items() -> Iterator[int]:
        for number in range(100):
            pulled.append(number)
            yield number

    assert next(batched(items(), 10)) == list(range(10))
    assert pulled == list(range(10))


# --- running bounded -------------------------------------------------------------------


def test_every_item_is_worked_on_with_at_most_the_concurrency_at_once() -> None:
    lock, running, peak, done = threading.Lock(), [0], [0], []

    def work(item: int) -> None:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.005)
        with lock:
            running[0] -= 1
            done.append(item)

    run_bounded(work, range(24), 4)
    assert sorted(done) == list(range(24))
    assert 1 <= peak[0] <= 4


def test_the_first_failure_stops_new_work_and_is_raised() -> None:
    started: list[int] = []
    lock = threading.Lock()

    def work(item: int) -> None:
        with lock:
            started.append(item)
        if item == 2:
            raise TransferFailed("part 2 refused")
        time.sleep(0.01)

    with pytest.raises(TransferFailed, match="part 2 refused"):
        run_bounded(work, range(1000), 2)
    assert len(started) < 20  # nowhere near all 1,000 were begun


# --- an object store's refusal ---------------------------------------------------------


def test_an_object_stores_error_code_is_read_from_its_xml() -> None:
    body = b"<?xml version='1.0'?><Error><Code>SignatureDoesNotMatch</Code></Error>"
    assert _s3_code(body) == "SignatureDoesNotMatch"
    assert _s3_code(b"") == ""
    assert _s3_code(b"</Code> then <Code>") == ""


# --- the upload journal ----------------------------------------------------------------


@pytest.fixture
def transfers(tmp_path: Path) -> Iterator[Transfers]:
    with (
        Client("https://gpu.example.com", "gpc_key") as client,
        Transfers(client, tmp_path / "state") as made,
    ):
        yield made


def test_a_journal_is_kept_per_storage_key_and_file_under_the_state_dir(
    transfers: Transfers, tmp_path: Path
) -> None:
    path = tree(tmp_path, {"model.bin": b"x" * 10}) / "model.bin"
    journal = transfers._journal_path("models", "llama/model.bin", path)
    assert journal.parent == tmp_path / "state" / "uploads"
    assert journal.suffix == ".json"
    assert transfers._journal_path("models", "llama/model.bin", path) == journal
    assert transfers._journal_path("other", "llama/model.bin", path) != journal
    assert transfers._journal_path("models", "llama/other.bin", path) != journal


def test_a_file_changed_since_the_interruption_gets_a_journal_of_its_own(
    transfers: Transfers, tmp_path: Path
) -> None:
    path = tree(tmp_path, {"model.bin": b"x" * 10}) / "model.bin"
    before = transfers._journal_path("models", "k", path)
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert transfers._journal_path("models", "k", path) != before


def test_a_journal_written_is_read_back_and_a_broken_one_is_none(
    transfers: Transfers, tmp_path: Path
) -> None:
    journal = tmp_path / "state" / "uploads" / "j.json"
    assert transfers._read_journal(journal) is None
    state = {"uploadID": "u-1", "partSizeBytes": 64, "parts": {"1": "etag-1"}}
    transfers._write_journal(journal, state)
    assert transfers._read_journal(journal) == state
    assert not journal.with_suffix(".tmp").exists()
    assert (journal.parent.stat().st_mode & 0o777) == 0o700
    journal.write_text('{"uploadID": ')  # cut short by a crash
    assert transfers._read_journal(journal) is None


def test_every_part_is_the_part_size_but_the_last_which_holds_the_rest() -> None:
    state = {"partSizeBytes": 64}
    assert [Transfers._part_length(150, state, number) for number in (1, 2, 3)] == [64, 64, 22]
    assert Transfers._part_length(128, state, 2) == 64
