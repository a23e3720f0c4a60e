"""Copies between local files and a storage through presigned URLs: bytes go straight
to the object store, never through the API.

- A file above one part is a multipart upload whose parts go up concurrently. Each
  finished part's ETag is written to a journal beside the user's state, so an upload
  interrupted by a crash, a lost network or Ctrl-C resumes with the parts it lacks: the
  API signs fresh URLs for them (`POST .../uploads/{id}/parts`).
- A directory is walked twice, lazily: once to count what to send (for the progress
  bar), once to send it. Neither walk keeps the file list, and at most `concurrency`
  files are in flight, so 100,000 files cost what 16 do. Small files are signed a
  thousand at a time (`upload-urls`, `download-urls`), so a file costs one request to
  the object store and a thousandth of one to the API.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

import urllib3

from .client import Client
from .errors import ApiError, TransferFailed

#: Called with the number of bytes just moved.
Progress = Callable[[int], None]
#: Files up to this size go up as one PUT signed in a batch; larger ones on their own,
#: in parts. Below the service's smallest part (S3's floor is 5 MiB).
SMALL_FILE_BYTES = 4 * 1024 * 1024
BATCH = 1000
DOWNLOAD_CHUNK = 1024 * 1024
#: Parts held in memory at once, across every file of a copy: a part is read whole
#: before its PUT (S3 wants its length), so this bounds memory at 4 times the part size
#: (256 MiB with the service's 64 MiB parts).
PART_SLOTS = 4
Item = TypeVar("Item")


@dataclass(frozen=True)
class Tally:
    files: int
    bytes: int


class Transfers:
    """Uploads and downloads for one client. `state_dir` holds the upload journals."""

    def __init__(
        self,
        client: Client,
        state_dir: Path,
        *,
        concurrency: int = 16,
        notify: Callable[[str], None] | None = None,
    ) -> None:
        self._client = client
        self._notify = notify or (lambda _: None)
        self._journals = state_dir / "uploads"
        self._concurrency = concurrency
        # Presigned URLs carry their own signature: this session sends no API credential.
        # urllib3, not httpx: measured on 64 MiB bodies, it PUTs twice and GETs six
        # times as fast (docs/decisions.md, 73). A lost connection is retried: a
        # presigned PUT or GET can be repeated safely.
        self._store = urllib3.PoolManager(
            maxsize=concurrency * 2,
            timeout=urllib3.Timeout(connect=10.0, read=300.0),
            retries=urllib3.Retry(total=3, backoff_factor=0.2, allowed_methods={"GET", "PUT"},
                                  status_forcelist=(500, 502, 503, 504), raise_on_status=False),
        )  # fmt: skip
        self._journal_lock = threading.Lock()
        self._part_slots = threading.Semaphore(PART_SLOTS)

    def close(self) -> None:
        self._store.clear()

    def __enter__(self) -> Transfers:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # --- uploads -----------------------------------------------------------------------

    def upload_file(self, path: Path, storage_id: str, key: str, progress: Progress) -> None:
        size = path.stat().st_size
        journal = self._journal_path(storage_id, key, path)
        state = self._read_journal(journal)
        if state is None:
            plan = self._client.plan_upload(storage_id, key, size)
            if plan["url"] is not None:
                self._put(plan["url"], path.read_bytes())
                progress(size)
                return
            state = {"uploadID": plan["uploadID"], "partSizeBytes": plan["partSizeBytes"],
                     "parts": {}}  # fmt: skip
            self._write_journal(journal, state)
            urls = {part["partNumber"]: part["url"] for part in plan["parts"]}
        else:
            urls = self._missing_part_urls(storage_id, state, size)
            done = len(state["parts"])
            self._notify(f"resuming {key}: {done} of {done + len(urls)} parts already sent")
            progress(sum(self._part_length(size, state, int(n)) for n in state["parts"]))
        self._upload_parts(path, size, storage_id, journal, state, urls, progress)

    def _missing_part_urls(
        self, storage_id: str, state: dict[str, Any], size: int
    ) -> dict[int, str]:
        count = -(-size // state["partSizeBytes"])
        missing = [n for n in range(1, count + 1) if str(n) not in state["parts"]]
        urls: dict[int, str] = {}
        for numbers in batched(missing, BATCH):
            answer = self._client.presign_parts(storage_id, state["uploadID"], numbers)
            urls.update({part["partNumber"]: part["url"] for part in answer["parts"]})
        return urls

    def _upload_parts(
        self, path: Path, size: int, storage_id: str, journal: Path,
        state: dict[str, Any], urls: dict[int, str], progress: Progress,
    ) -> None:  # fmt: skip
        part_size: int = state["partSizeBytes"]

        def send(number: int) -> None:
            with self._part_slots, path.open("rb") as source:
                source.seek((number - 1) * part_size)
                body = source.read(part_size)
                etag = self._put(urls[number], body)
            with self._journal_lock:
                state["parts"][str(number)] = etag
                self._write_journal(journal, state)
            progress(len(body))

        self._run_bounded(send, sorted(urls))
        etags = {int(n): etag for n, etag in state["parts"].items()}
        try:
            self._client.complete_upload(storage_id, state["uploadID"], etags)
        except ApiError as error:
            if error.status == 404:  # the store dropped the upload: start again next time
                journal.unlink(missing_ok=True)
            raise
        journal.unlink(missing_ok=True)

    def upload_tree(
        self, root: Path, storage_id: str, prefix: str, progress: Progress,
        on_file: Callable[[], None] | None = None,
        skip: Callable[[str], bool] | None = None,
    ) -> None:  # fmt: skip
        """Every file under `root` to `prefix`, but those whose key `skip` says are
        already there as they are."""

        def send(item: tuple[Path, str, int, str | None]) -> None:
            path, key, size, url = item
            if url is None:
                self.upload_file(path, storage_id, key, progress)
            else:
                self._put(url, path.read_bytes())
                progress(size)
            if on_file:
                on_file()

        self._run_bounded(send, self._signed_uploads(root, storage_id, prefix, skip))

    def _signed_uploads(
        self, root: Path, storage_id: str, prefix: str, skip: Callable[[str], bool] | None
    ) -> Iterator[tuple[Path, str, int, str | None]]:
        """(file, key, size, URL) for each file under `root` not skipped; the URL is None
        for a file too large for one PUT, which is planned on its own."""
        keyed = ((path, prefix + path.relative_to(root).as_posix()) for path in walk(root))
        for batch in batched((item for item in keyed if not (skip and skip(item[1]))), BATCH):
            files = [(path, key, path.stat().st_size) for path, key in batch]
            small = [(key, size) for _, key, size in files if size <= SMALL_FILE_BYTES]
            urls = self._client.presign_uploads(storage_id, small) if small else {}
            for path, key, size in files:
                yield path, key, size, urls.get(key)

    def _put(self, url: str, body: bytes) -> str:
        try:
            response = self._store.request("PUT", url, body=body)
        except urllib3.exceptions.HTTPError as error:
            raise TransferFailed(f"upload to the object store failed: {error}") from error
        if response.status >= 300:
            raise TransferFailed(
                f"the object store refused an upload: HTTP {response.status} {_s3_code(response.data)}"
            )
        return str(response.headers.get("etag", "")).strip('"')

    # --- downloads ---------------------------------------------------------------------

    def download_file(
        self, storage_id: str, key: str, target: Path, progress: Progress, url: str | None = None
    ) -> None:
        """Stream one object to `target`, through a temporary file renamed at the end so a
        half-written file never takes the target's name."""
        url = url or self._client.presign_download(storage_id, key)["url"]
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.gpucloud-partial")
        try:
            response = self._store.request("GET", url, preload_content=False)
            try:
                if response.status >= 300:
                    raise TransferFailed(
                        f"the object store refused {key!r}: HTTP {response.status} "
                        f"{_s3_code(response.read())}"
                    )
                with partial.open("wb") as sink:
                    for chunk in response.stream(DOWNLOAD_CHUNK):
                        sink.write(chunk)
                        progress(len(chunk))
            finally:
                response.release_conn()
        except urllib3.exceptions.HTTPError as error:
            partial.unlink(missing_ok=True)
            raise TransferFailed(f"download of {key!r} failed: {error}") from error
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        partial.replace(target)

    def objects(self, storage_id: str, prefix: str) -> Iterator[tuple[str, int]]:
        """(key, size) of every object under `prefix`, a page at a time."""
        cursor: str | None = None
        while True:
            page = self._client.list_objects(storage_id, prefix=prefix, cursor=cursor)
            for entry in page["objects"]:
                yield entry["key"], entry["sizeBytes"]
            cursor = page["nextCursor"]
            if not cursor:
                return

    def download_tree(
        self, storage_id: str, prefix: str, root: Path, progress: Progress,
        on_file: Callable[[], None] | None = None,
    ) -> None:  # fmt: skip
        def fetch(item: tuple[str, str]) -> None:
            key, url = item
            target = local_path(root, key[len(prefix) :])
            self.download_file(storage_id, key, target, progress, url)
            if on_file:
                on_file()

        self._run_bounded(fetch, self._signed_downloads(storage_id, prefix))

    def _signed_downloads(self, storage_id: str, prefix: str) -> Iterator[tuple[str, str]]:
        for batch in batched((key for key, _ in self.objects(storage_id, prefix)), BATCH):
            urls = self._client.presign_downloads(storage_id, batch)
            yield from ((key, urls[key]) for key in batch)

    # --- the machinery -----------------------------------------------------------------

    def _run_bounded(self, work: Callable[[Item], None], items: Iterable[Item]) -> None:
        run_bounded(work, items, self._concurrency)

    def _journal_path(self, storage_id: str, key: str, path: Path) -> Path:
        """One journal per (endpoint, storage, key, file as it is now): a file changed
        since the interruption starts a new upload rather than mixing old and new parts."""
        stat = path.stat()
        identity = json.dumps([self._client.endpoint, storage_id, key, str(path.resolve()),
                               stat.st_size, stat.st_mtime_ns])  # fmt: skip
        return self._journals / f"{hashlib.sha256(identity.encode()).hexdigest()}.json"

    def _read_journal(self, journal: Path) -> dict[str, Any] | None:
        with contextlib.suppress(FileNotFoundError, ValueError):
            state: dict[str, Any] = json.loads(journal.read_text())
            return state
        return None

    def _write_journal(self, journal: Path, state: dict[str, Any]) -> None:
        journal.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        scratch = journal.with_suffix(".tmp")
        scratch.write_text(json.dumps(state))
        scratch.replace(journal)

    @staticmethod
    def _part_length(size: int, state: dict[str, Any], number: int) -> int:
        part_size: int = state["partSizeBytes"]
        return min(part_size, size - (number - 1) * part_size)


def walk(root: Path) -> Iterator[Path]:
    """Every regular file under `root`, depth first, without holding the tree."""
    with os.scandir(root) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                yield from walk(Path(entry.path))
            elif entry.is_file(follow_symlinks=False):
                yield Path(entry.path)


def batched(items: Iterable[Item], size: int) -> Iterator[list[Item]]:
    """itertools.batched, which needs Python 3.12."""
    batch: list[Item] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def tally(root: Path) -> Tally:
    files = size = 0
    for path in walk(root):
        files += 1
        size += path.stat().st_size
    return Tally(files, size)


def local_path(root: Path, relative_key: str) -> Path:
    """Where an object lands under `root`; a key that would climb out of it is refused."""
    parts = [part for part in PurePosixPath(relative_key).parts if part not in {"", "/"}]
    if not parts or any(part in {".", ".."} for part in parts):
        raise TransferFailed(f"refusing to write the object {relative_key!r} outside {root}")
    return root.joinpath(*parts)


def _s3_code(body: bytes) -> str:
    text = body.decode(errors="replace")
    start, end = text.find("<Code>"), text.find("</Code>")
    return text[start + 6 : end] if 0 <= start < end else ""


def run_bounded(work: Callable[[Item], None], items: Iterable[Item], concurrency: int) -> None:
    """Run `work` on every item, `concurrency` at a time, pulling items lazily (so URLs
    signed a batch at a time are used soon after). The first failure stops new work and
    is raised once the running work has finished."""
    with ThreadPoolExecutor(concurrency) as pool:
        running: set[Future[None]] = set()
        try:
            for item in items:
                if len(running) >= concurrency:
                    done, running = wait(running, return_when=FIRST_COMPLETED)
                    for future in done:
                        future.result()
                running.add(pool.submit(work, item))
            for future in running:
                future.result()
        except BaseException:
            for future in running:
                future.cancel()
            raise
