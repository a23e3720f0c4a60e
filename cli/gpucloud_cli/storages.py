"""`gpucloud storages` and `gpucloud cp`: buckets and volumes, and copies to and from them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import click
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from gpucloud_client import ApiError, Transfers
from gpucloud_client.transfers import BATCH, batched, local_path, run_bounded, tally, walk

from . import config
from .copies import StoredObject, same_content, stored_object, stored_objects
from .session import Column, Failure, Session, pass_session

SCHEME = "gpc://"
COLUMNS: list[Column] = [
    ("ID", lambda s: s["storageID"]),
    ("KIND", lambda s: s["kind"]),
    ("STATE", lambda s: s["state"]),
    ("SIZE", lambda s: human_bytes(s["sizeBytes"])),
    ("USED", lambda s: human_bytes(s["usedBytes"]) if s.get("usedBytes") is not None else None),
    ("ATTACHED TO", lambda s: s.get("attachedTo")),
    ("PROJECT", lambda s: s.get("project", "default")),
]


@click.group()
def storages() -> None:
    """Object storages (buckets) and volumes."""


@storages.command("ls")
@pass_session
def list_storages(session: Session) -> None:
    """List the tenant's storages."""
    session.emit(session.client.list_storages(), COLUMNS)


@storages.command("get")
@click.argument("storage_id")
@pass_session
def get_storage(session: Session, storage_id: str) -> None:
    """One storage."""
    session.emit(session.client.get_storage(storage_id), COLUMNS)


@storages.command("create")
@click.argument("storage_id")
@click.option(
    "--size", "size", required=True, help="Quota (object) or size (volume): 20GiB, 500MB, …"
)
@click.option(
    "--kind", type=click.Choice(["object", "volume"]), default="object", show_default=True
)
@click.option(
    "--project",
    help="The project it belongs to: its members see it and its work attaches it "
    "(default: default, whose storages every project's work may attach).",
)
@pass_session
def create_storage(
    session: Session, storage_id: str, size: str, kind: str, project: str | None
) -> None:
    """Create a storage.

    \b
    Example:
      gpucloud storages create models --size 200GiB
      gpucloud storages create vision-data --size 50GiB --project vision
    """
    body: dict[str, Any] = {"storageID": storage_id, "kind": kind, "sizeBytes": parse_size(size)}
    if project is not None:
        body["project"] = project
    session.emit(session.client.create_storage(body), COLUMNS)


@storages.command("rm")
@click.argument("location")
@click.option("--force", is_flag=True, help="Delete a bucket that still holds objects, with them.")
@click.option("--yes", is_flag=True, help="Do not ask.")
@pass_session
def remove_storage(session: Session, location: str, force: bool, yes: bool) -> None:
    """Delete a storage (STORAGE or gpc://STORAGE), after asking; `delete` is the same.

    The API deletes whole storages, not single objects: to delete objects, make S3
    credentials (`gpucloud storages credentials STORAGE --mode read-write`) for an S3 tool.

    \b
    Examples:
      gpucloud storages rm scratch
      gpucloud storages rm old-checkpoints --force --yes
    """
    storage_id = location
    if location.startswith(SCHEME):
        remote = parse_remote(location)
        if remote.key:
            raise click.UsageError(
                f"{location} names an object, and the API deletes whole storages only: "
                f"`gpucloud storages rm {remote.storage}` deletes the storage, or use S3 "
                f"credentials (`gpucloud storages credentials {remote.storage} --mode read-write`)"
            )
        storage_id = remote.storage
    what = f"storage {storage_id}" + (" and every object in it" if force else "")
    if not yes:
        click.confirm(f"Delete {what}?", abort=True, err=True)
    try:
        session.client.delete_storage(storage_id, force=force)
    except ApiError as error:
        if error.code != "storage_not_empty":
            raise
        raise Failure(
            f"storage {storage_id} holds objects: `gpucloud storages rm {storage_id} --force` "
            "deletes it with them"
        ) from error
    session.note(f"storage {storage_id} deleted")


storages.add_command(remove_storage, "delete")


@storages.command("objects")
@click.argument("location")
@pass_session
def list_objects(session: Session, location: str) -> None:
    """List the objects under gpc://STORAGE/PREFIX."""
    remote = parse_remote(location)
    with Transfers(session.client, config.state_dir()) as transfers:
        rows = (
            {"key": key, "sizeBytes": size}
            for key, size in transfers.objects(remote.storage, remote.key)
        )
        session.emit(
            rows, [("KEY", lambda o: o["key"]), ("SIZE", lambda o: human_bytes(o["sizeBytes"]))]
        )


@storages.command("credentials")
@click.argument("storage_id")
@click.option(
    "--mode", type=click.Choice(["read-only", "read-write"]), default="read-only", show_default=True
)
@pass_session
def create_accessor(session: Session, storage_id: str, mode: str) -> None:
    """S3 credentials for this storage alone. The secret is shown once."""
    created = session.client.create_accessor(storage_id, mode)
    session.emit(created, [(name.upper(), field_reader(name)) for name in created])


def field_reader(name: str) -> Callable[[dict[str, object]], object]:
    return lambda row: row.get(name)


@dataclass(frozen=True)
class Remote:
    storage: str
    key: str

    @property
    def prefix(self) -> str:
        """The key as a "folder": empty, or ending in a slash."""
        return self.key if not self.key or self.key.endswith("/") else self.key + "/"


def parse_remote(location: str) -> Remote:
    if not location.startswith(SCHEME):
        raise click.BadParameter(f"{location!r} is not {SCHEME}STORAGE/KEY")
    storage, _, key = location[len(SCHEME) :].partition("/")
    if not storage:
        raise click.BadParameter(f"{location!r} names no storage")
    return Remote(storage, key)


@click.command()
@click.argument("source")
@click.argument("target")
@click.option(
    "--recursive", "-r", is_flag=True, help="Copy a directory, or every object under a prefix."
)
@click.option("--concurrency", "-j", type=click.IntRange(1, 64), default=16, show_default=True,
              help="Files (and parts) in flight at once.")  # fmt: skip
@pass_session
def cp(session: Session, source: str, target: str, recursive: bool, concurrency: int) -> None:
    """Copy files to or from a storage: one side is a local path, the other gpc://STORAGE/KEY.

    Large files go up in concurrent parts; an interrupted upload resumes where it
    stopped when the same command is run again. With -r, a directory's files land under
    the key prefix (`dir/a/b.txt` as `PREFIX/a/b.txt`), and the objects under a prefix
    land in the directory the same way.

    \b
    Examples:
      gpucloud cp model.safetensors gpc://models/llama/
      gpucloud cp -r ./dataset gpc://datasets/v1/
      gpucloud cp gpc://models/llama/model.safetensors .
      gpucloud cp -r gpc://datasets/v1/ ./dataset
    """
    uploading = target.startswith(SCHEME)
    if uploading == source.startswith(SCHEME):
        raise click.UsageError(f"one side must be local and the other {SCHEME}STORAGE/KEY")
    with Transfers(
        session.client, config.state_dir(), concurrency=concurrency, notify=session.note
    ) as transfers:
        try:
            if uploading:
                upload(session, transfers, Path(source), parse_remote(target), recursive)
            else:
                download(session, transfers, parse_remote(source), Path(target), recursive,
                         concurrency)  # fmt: skip
        except KeyboardInterrupt:
            session.note("interrupted; run the same command again to resume the upload" if uploading
                         else "interrupted")  # fmt: skip
            raise SystemExit(130) from None


def upload(
    session: Session, transfers: Transfers, source: Path, remote: Remote, recursive: bool
) -> None:
    if source.is_dir():
        if not recursive:
            raise click.UsageError(f"{source} is a directory: use -r")
        upload_tree(session, transfers, source, remote.storage, remote.prefix)
        return
    if not source.is_file():
        raise click.UsageError(f"{source}: no such file")
    key = remote.prefix + source.name if remote.prefix == remote.key else remote.key
    size = source.stat().st_size
    stored = stored_object(session.client, remote.storage, key)
    if stored is not None and same_content(source, stored):
        session.note(f"{SCHEME}{remote.storage}/{key} holds {source} unchanged: skipped 1 file")
        return
    with progress_bar(session, size, 1) as (advance, file_done):
        transfers.upload_file(source, remote.storage, key, advance)
        file_done()
    session.note(f"{source} → {SCHEME}{remote.storage}/{key} ({human_bytes(size)})")


def upload_tree(
    session: Session, transfers: Transfers, root: Path, storage_id: str, prefix: str
) -> None:
    """Send the files under `root` that the storage does not hold as they are, their
    small files signed a thousand at a time."""
    stored = {o.key: o for o in stored_objects(session.client, storage_id, prefix)}
    where = f"{SCHEME}{storage_id}/{prefix}"
    if not stored:
        counted = tally(root)
        with progress_bar(session, counted.bytes, counted.files) as (advance, file_done):
            transfers.upload_tree(root, storage_id, prefix, advance, file_done)
        session.note(f"{counted.files} files, {human_bytes(counted.bytes)} → {where}")
        return
    sending: list[tuple[Path, str, int]] = []
    unchanged: set[str] = set()
    for path in walk(root):
        key = prefix + path.relative_to(root).as_posix()
        known = stored.get(key)
        if known is not None and same_content(path, known):
            unchanged.add(key)
        else:
            sending.append((path, key, path.stat().st_size))
    skipped = len(unchanged)
    total = sum(size for _, _, size in sending)
    with progress_bar(session, total, len(sending)) as (advance, file_done):
        transfers.upload_tree(
            root, storage_id, prefix, advance, file_done, skip=unchanged.__contains__
        )
    session.note(
        f"{len(sending)} files, {human_bytes(total)} → {where}; {skipped} unchanged, skipped"
    )


def download(
    session: Session, transfers: Transfers, remote: Remote, target: Path, recursive: bool,
    concurrency: int,
) -> None:  # fmt: skip
    if recursive:
        download_tree(session, transfers, remote.storage, remote.prefix, target, concurrency)
        return
    name = PurePosixPath(remote.key).name
    if not name or remote.key.endswith("/"):
        raise click.UsageError(f"{SCHEME}{remote.storage}/{remote.key} names a prefix: use -r")
    destination = target / name if target.is_dir() else target
    stored = stored_object(session.client, remote.storage, remote.key)
    if stored is None:
        raise Failure(f"no object {remote.key!r} in storage {remote.storage!r}")
    if same_content(destination, stored):
        session.note(f"{destination} holds {SCHEME}{remote.storage}/{remote.key} unchanged: "
                     "skipped 1 file")  # fmt: skip
        return
    with progress_bar(session, stored.size, 1) as (advance, file_done):
        transfers.download_file(remote.storage, remote.key, destination, advance)
        file_done()
    session.note(
        f"{SCHEME}{remote.storage}/{remote.key} → {destination} ({human_bytes(stored.size)})"
    )


def download_tree(
    session: Session, transfers: Transfers, storage_id: str, prefix: str, root: Path,
    concurrency: int,
) -> None:  # fmt: skip
    """Fetch the objects under `prefix` that `root` does not hold as they are, their
    URLs signed a thousand at a time as the copy reaches them."""
    fetching: list[tuple[StoredObject, Path]] = []
    skipped = 0
    for stored in stored_objects(session.client, storage_id, prefix):
        destination = local_path(root, stored.key[len(prefix) :])
        if same_content(destination, stored):
            skipped += 1
        else:
            fetching.append((stored, destination))
    total = sum(stored.size for stored, _ in fetching)

    def signed() -> Iterator[tuple[str, Path, str]]:
        for batch in batched(fetching, BATCH):
            urls = session.client.presign_downloads(storage_id, [o.key for o, _ in batch])
            yield from ((o.key, destination, urls[o.key]) for o, destination in batch)

    with progress_bar(session, total, len(fetching)) as (advance, file_done):

        def fetch(item: tuple[str, Path, str]) -> None:
            key, destination, url = item
            transfers.download_file(storage_id, key, destination, advance, url)
            file_done()

        run_bounded(fetch, signed(), concurrency)
    session.note(
        f"{SCHEME}{storage_id}/{prefix} → {root} ({len(fetching)} files, {human_bytes(total)}; "
        f"{skipped} unchanged, skipped)"
    )


@contextmanager
def progress_bar(
    session: Session, total_bytes: int, total_files: int
) -> Iterator[tuple[Callable[[int], None], Callable[[], None]]]:
    """(advance(bytes), file_done()) callbacks, drawn as a bar on a terminal."""
    shown = session.interactive
    with Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
        MofNCompleteColumn(), TimeRemainingColumn(), console=session.err, disable=not shown,
    ) as bar:  # fmt: skip
        moved = bar.add_task("bytes", total=total_bytes)
        files = bar.add_task("files", total=total_files, visible=False)

        def advance(count: int) -> None:
            bar.advance(moved, count)

        def file_done() -> None:
            bar.advance(files, 1)

        yield advance, file_done


UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
         "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}  # fmt: skip


def parse_size(text: str) -> int:
    digits = text.strip()
    split = next((i for i, c in enumerate(digits) if not (c.isdigit() or c == ".")), len(digits))
    number, unit = digits[:split], digits[split:].strip().lower()
    refused = click.BadParameter(f"{text!r} is not a size like 20GiB or 500MB", param_hint="--size")
    if not number or unit not in UNITS:
        raise refused
    try:
        return int(float(number) * UNITS[unit])
    except ValueError:  # `1.2.3`, `.`
        raise refused from None


def human_bytes(count: int) -> str:
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{count} B"
