"""Storage: presigned transfers against a direct S3 client, and listing at 100,000 objects,
on MinIO and on Ceph RGW.

Side by side in one run, on each object store in turn (its own stack,
GPUCLOUD_OBJECT_STORE; the stack that was running is running again at the end):

- upload and download of one large object: our path (plan through the API, then
  presigned part PUTs / a presigned GET) against minio-py holding the store's
  platform credentials (put_object / get_object), each with 3 parts in flight;
- one 1,000-key page of a 100,000-object bucket: through the API (gateway,
  storage service, the store) against minio-py's raw ListObjectsV2 call; and a
  walk of the whole bucket both ways.

`python -m bench storage [--stores minio,ceph] [--size-mib 256] [--objects 100000]`
(`--objects 0`: transfers only)
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from statistics import median
from typing import Any
from urllib.parse import urlparse

import httpx
import urllib3
from minio import Minio

from .common import bench_tenant, object_storage, percentile, stack, stack_env, stack_running

MIB = 1024 * 1024
PARALLEL_PARTS = 3
ROUNDS = 3
PAGE_SAMPLES = 30
STORES = ("minio", "ceph")
STORE_NAMES = {"minio": "MinIO", "ceph": "Ceph RGW"}


@dataclass
class StoreFigures:
    """One store's results: each row holds (ours, direct S3)."""

    upload_mib_s: tuple[float, float]
    download_mib_s: tuple[float, float]
    page_p50_ms: tuple[float, float] | None = None
    page_p99_ms: tuple[float, float] | None = None
    walk_s: tuple[float, float] | None = None
    seeded_s: float | None = None


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench storage", description=__doc__)
    parser.add_argument(
        "--stores",
        type=lambda value: [store.strip() for store in value.split(",") if store.strip()],
        default=list(STORES),
        help="object stores to measure, comma-separated (default: minio,ceph)",
    )
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--objects", type=int, default=100_000)
    return parser


async def _upload_presigned(
    http: httpx.AsyncClient, headers: dict[str, str], storage: str, key: str, payload: bytes
) -> None:
    plan = await http.post(
        f"/v1/storages/{storage}/uploads",
        json={"key": key, "sizeBytes": len(payload)},
        headers=headers,
    )
    plan.raise_for_status()
    body = plan.json()
    if body.get("uploadID") is None:  # small enough for one PUT
        (await http.put(body["url"], content=payload)).raise_for_status()
        return
    size = body["partSizeBytes"]
    gate = asyncio.Semaphore(PARALLEL_PARTS)

    async def part(number: int, url: str) -> dict[str, Any]:
        async with gate:
            sent = await http.put(url, content=payload[(number - 1) * size : number * size])
            sent.raise_for_status()
            return {"partNumber": number, "etag": sent.headers["etag"]}

    parts = await asyncio.gather(*(part(p["partNumber"], p["url"]) for p in body["parts"]))
    done = await http.post(
        f"/v1/storages/{storage}/uploads/{body['uploadID']}/complete",
        json={"parts": list(parts)},
        headers=headers,
    )
    done.raise_for_status()


async def _download_presigned(
    http: httpx.AsyncClient, headers: dict[str, str], storage: str, key: str
) -> int:
    link = await http.post(f"/v1/storages/{storage}/downloads", json={"key": key}, headers=headers)
    link.raise_for_status()
    # Fetched with urllib3, the HTTP client minio-py itself uses: the comparison
    # is then presigned URL against signed request, not one client against another.
    return await asyncio.to_thread(_plain_get, link.json()["url"])


_POOL = urllib3.PoolManager()


def _plain_get(url: str) -> int:
    response = _POOL.request("GET", url, preload_content=False)
    try:
        return sum(len(chunk) for chunk in response.stream(MIB))
    finally:
        response.release_conn()


def _direct_get(client: Minio, bucket: str, key: str) -> int:
    response = client.get_object(bucket, key)
    try:
        return sum(len(chunk) for chunk in response.stream(MIB))
    finally:
        response.close()
        response.release_conn()


async def _timed(work: Any) -> float:
    started = time.perf_counter()
    await work
    return time.perf_counter() - started


def _seed(client: Minio, bucket: str, count: int) -> None:
    def put(index: int) -> None:
        client.put_object(bucket, f"files/{index:07}.txt", io.BytesIO(b"x"), 1)

    with ThreadPoolExecutor(max_workers=32) as pool:
        list(pool.map(put, range(count)))


async def main(args: argparse.Namespace) -> None:
    unknown = set(args.stores) - set(STORES)
    if unknown or not args.stores:
        raise SystemExit(f"--stores takes {' and '.join(STORES)}, not {args.stores}")
    running = {store for store in STORES if stack_running(store)}
    # The stack that was running goes last, so that it is left running; one stack at a
    # time, since both bind the same ports.
    order = sorted(args.stores, key=lambda store: store in running)
    results: dict[str, StoreFigures] = {}
    try:
        for store in order:
            for other in STORES:
                if other != store:
                    stack("down", store=other)
            print(f"\n{STORE_NAMES[store]}: starting its stack", flush=True)
            stack("up", store=store)
            results[store] = await _measure(store, args.size_mib * MIB, args.objects)
            _print(results, args)
    finally:
        for store in STORES:
            if store not in running:
                stack("down", store=store)
        for store in running:
            stack("up", store=store)


async def _measure(store: str, size: int, objects: int) -> StoreFigures:
    env = stack_env(store=store)
    endpoint = urlparse(env["GPUCLOUD_S3_ENDPOINT"])
    direct = Minio(
        endpoint.netloc,
        access_key=env["GPUCLOUD_S3_ACCESS_KEY"],
        secret_key=env["GPUCLOUD_S3_SECRET_KEY"],
        secure=False,
    )
    admin = {"Authorization": f"Bearer {env['GPUCLOUD_BOOTSTRAP_ADMIN_KEY']}"}
    limits = httpx.Limits(max_connections=64)
    async with httpx.AsyncClient(
        base_url=env["GPUCLOUD_GATEWAY_URL"], timeout=300, limits=limits
    ) as http:
        tenant_id, headers = await bench_tenant(http, admin, "bench-storage")
        try:
            figures = await _transfers(http, headers, direct, size)
            if objects:
                await _listing(http, headers, direct, objects, figures)
            return figures
        finally:
            await http.delete(f"/v1/tenants/{tenant_id}", headers=admin)


async def _transfers(
    http: httpx.AsyncClient, headers: dict[str, str], direct: Minio, size: int
) -> StoreFigures:
    storage = await object_storage(http, headers, 4 * size * ROUNDS)
    bucket, storage_id = storage["bucket"], storage["storageID"]
    payload = os.urandom(size)
    timings: dict[str, list[float]] = {
        key: [] for key in ("up-ours", "up-direct", "dn-ours", "dn-direct")
    }
    for round_ in range(ROUNDS):
        ours_key, direct_key = f"ours-{round_}", f"direct-{round_}"
        timings["up-ours"].append(
            await _timed(_upload_presigned(http, headers, storage_id, ours_key, payload))
        )
        upload = asyncio.to_thread(
            direct.put_object, bucket, direct_key, io.BytesIO(payload), size,
            part_size=64 * MIB, num_parallel_uploads=PARALLEL_PARTS,
        )  # fmt: skip
        timings["up-direct"].append(await _timed(upload))
        timings["dn-ours"].append(
            await _timed(_download_presigned(http, headers, storage_id, ours_key))
        )
        timings["dn-direct"].append(
            await _timed(asyncio.to_thread(_direct_get, direct, bucket, direct_key))
        )
    rate = {name: size / MIB / median(values) for name, values in timings.items()}
    return StoreFigures(
        upload_mib_s=(rate["up-ours"], rate["up-direct"]),
        download_mib_s=(rate["dn-ours"], rate["dn-direct"]),
    )


async def _listing(
    http: httpx.AsyncClient,
    headers: dict[str, str],
    direct: Minio,
    count: int,
    figures: StoreFigures,
) -> None:
    storage = await object_storage(http, headers, 1024**3)
    bucket, storage_id = storage["bucket"], storage["storageID"]
    started = time.perf_counter()
    await asyncio.to_thread(_seed, direct, bucket, count)
    figures.seeded_s = time.perf_counter() - started
    path = f"/v1/storages/{storage_id}/objects"
    step = max(1, count // PAGE_SAMPLES)
    starts = [f"files/{index:07}.txt" for index in range(0, count, step)][:PAGE_SAMPLES]

    ours: list[float] = []
    raw: list[float] = []
    for start_after in starts:
        cursor = start_after.encode().hex()
        began = time.perf_counter()
        page = await http.get(path, params={"limit": 1000, "cursor": cursor}, headers=headers)
        page.raise_for_status()
        ours.append(time.perf_counter() - began)

        def raw_page(after: str = start_after) -> int:
            listing = direct._list_objects(bucket, prefix="", max_keys=1000, start_after=after)
            return sum(1 for _, _ in zip(range(1000), listing, strict=False))

        began = time.perf_counter()
        await asyncio.to_thread(raw_page)
        raw.append(time.perf_counter() - began)

    walk_started = time.perf_counter()
    seen, cursor_value = 0, None
    while True:
        params: dict[str, Any] = {"limit": 1000}
        if cursor_value:
            params["cursor"] = cursor_value
        page_body = (await http.get(path, params=params, headers=headers)).json()
        seen += len(page_body["objects"])
        cursor_value = page_body["nextCursor"]
        if not cursor_value:
            break
    walk_ours = time.perf_counter() - walk_started
    walk_started = time.perf_counter()
    raw_seen = await asyncio.to_thread(
        lambda: sum(1 for _ in direct.list_objects(bucket, recursive=True))
    )
    walk_raw = time.perf_counter() - walk_started
    assert seen == raw_seen == count, (seen, raw_seen, count)
    figures.page_p50_ms = (percentile(ours, 50.0) * 1000, percentile(raw, 50.0) * 1000)
    figures.page_p99_ms = (percentile(ours, 99.0) * 1000, percentile(raw, 99.0) * 1000)
    figures.walk_s = (walk_ours, walk_raw)


def _print(results: dict[str, StoreFigures], args: argparse.Namespace) -> None:
    """Every store measured so far, side by side: ours, direct S3 and their ratio."""
    print(
        f"\none {args.size_mib} MiB object, median of {ROUNDS} rounds, {PARALLEL_PARTS} parts in"
        f" flight; one 1,000-key page of {args.objects:,} objects, {PAGE_SAMPLES} pages at"
        " spread cursors; the whole bucket page after page"
    )
    stores = list(results)
    header = f"{'':<16}" + "".join(
        f"{STORE_NAMES[store] + ': ours / direct S3 / ratio':>45}" for store in stores
    )
    print(header)
    rows: list[tuple[str, str, str]] = [
        ("upload", "upload_mib_s", "MiB/s"),
        ("download", "download_mib_s", "MiB/s"),
        ("page p50", "page_p50_ms", "ms"),
        ("page p99", "page_p99_ms", "ms"),
        ("whole walk", "walk_s", "s"),
    ]
    for label, field, unit in rows:
        cells = []
        for store in stores:
            pair = getattr(results[store], field)
            if pair is None:
                cells.append(f"{'-':>45}")
                continue
            ours, raw = pair
            cells.append(f"{ours:>12,.1f} {unit:<5} {raw:>12,.1f} {unit:<5} {ours / raw:>6.2f}x")
        print(f"{label:<16}" + "".join(cells))
    seeded = [
        f"{STORE_NAMES[store]} {figures.seeded_s:.0f} s"
        for store, figures in results.items()
        if figures.seeded_s is not None
    ]
    if seeded:
        print(f"seeding {args.objects:,} objects, 32 at a time: {', '.join(seeded)}")
