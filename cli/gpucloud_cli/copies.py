"""What a copy may skip: a file and an object that hold the same bytes.

The object store's ETag is what the API lists for each object. For an object sent in
one PUT it is the MD5 of its bytes; for a multipart upload it is the MD5 of its parts'
MD5s, then `-` and the number of parts. A file is the same as an object when its size
matches and so does the ETag computed from its bytes. A multipart ETag does not say the
part size, so the sizes this CLI and common S3 tools use are tried; an object whose
ETag none of them gives (another part size, or an encrypted bucket, whose ETags are not
MD5s) is copied again: a skip needs a matching digest, never a guess.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from gpucloud_client import Client

MIB = 1024 * 1024
#: The storage service's default smallest part, and the part sizes of common S3 tools
#: (the AWS CLI's 8 MiB, mc's 16 MiB, S3's 5 MiB floor).
PART_SIZES = (64 * MIB, 8 * MIB, 16 * MIB, 5 * MIB)
#: The most parts a plan of the storage service lists: a larger object gets larger
#: parts (its `part_size`), in whole MiB.
MAX_PLANNED_PARTS = 1000
READ_CHUNK = MIB
Item = TypeVar("Item")


@dataclass(frozen=True)
class StoredObject:
    key: str
    size: int
    etag: str


def stored_objects(client: Client, storage_id: str, prefix: str) -> Iterator[StoredObject]:
    """Every object under `prefix`, with its size and ETag, a page at a time."""
    cursor: str | None = None
    while True:
        page = client.list_objects(storage_id, prefix=prefix, cursor=cursor)
        for entry in page["objects"]:
            yield StoredObject(entry["key"], entry["sizeBytes"], entry["etag"])
        cursor = page["nextCursor"]
        if not cursor:
            return


def stored_object(client: Client, storage_id: str, key: str) -> StoredObject | None:
    """The object at `key`, if there is one. Keys sort after their prefixes, so it is
    the first key listed under its own name: one listing call of one key."""
    first = client.list_objects(storage_id, prefix=key, limit=1)["objects"]
    if not first or first[0]["key"] != key:
        return None
    return StoredObject(key, first[0]["sizeBytes"], first[0]["etag"])


def same_content(path: Path, stored: StoredObject) -> bool:
    """Whether the local file holds the object's bytes (size, then MD5 against ETag)."""
    try:
        if not path.is_file() or path.stat().st_size != stored.size:
            return False
    except OSError:
        return False
    etag = stored.etag.strip('"').lower()
    digest, dash, count = etag.partition("-")
    if not dash:
        return md5_of_file(path) == digest
    if not count.isdigit():
        return False
    return any(multipart_etag(path, size) == etag for size in part_sizes(stored.size, int(count)))


def part_sizes(size: int, parts: int) -> list[int]:
    """The part sizes worth trying for an object of `size` bytes sent in `parts` parts:
    those that split it into exactly that many."""
    service = max(PART_SIZES[0], -(-size // MAX_PLANNED_PARTS // MIB) * MIB)
    even = -(-size // parts // MIB) * MIB if parts else 0
    found: list[int] = []
    for candidate in (service, even, *PART_SIZES):
        if candidate > 0 and -(-size // candidate) == parts and candidate not in found:
            found.append(candidate)
    return found


def md5_of_file(path: Path) -> str:
    with path.open("rb") as source:
        return hashlib.file_digest(source, lambda: hashlib.md5(usedforsecurity=False)).hexdigest()


def multipart_etag(path: Path, part_size: int) -> str:
    """The ETag S3 gives the file uploaded in parts of `part_size`."""
    digests: list[bytes] = []
    with path.open("rb") as source:
        while True:
            part = hashlib.md5(usedforsecurity=False)
            left = part_size
            while left and (chunk := source.read(min(READ_CHUNK, left))):
                part.update(chunk)
                left -= len(chunk)
            if left == part_size:  # nothing read: the file has ended
                break
            digests.append(part.digest())
    whole = hashlib.md5(b"".join(digests), usedforsecurity=False).hexdigest()
    return f"{whole}-{len(digests)}"
