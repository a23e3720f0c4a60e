"""CLI: `gpucloud cp` against a raw minio-py loop, on the same files.

Side by side in one run, against the running stack, each way (upload, download):

- N small files (64 to 127 bytes): `gpucloud cp -r` (the installed command, run as a
  subprocess: its start-up is in the figure) against a minio-py loop of
  fput_object / fget_object over a pool of the same 16 threads;
- one large file: `gpucloud cp` against minio-py's fput_object (64 MiB parts, 4 in
  flight, as the CLI) and fget_object;
- each upload again, nothing changed: `gpucloud cp` compares size and ETag and sends
  nothing, where the raw loop, which has no such check, sends everything again.

The raw loop holds a read-write accessor of the same bucket: a tenant's own scoped S3
credentials, the fastest path a tenant has without the CLI.

`python -m bench cli [--files 10000] [--size-mib 1024]`
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlparse

import httpx
from minio import Minio

from .common import bench_tenant, object_storage, stack_env

MIB = 1024 * 1024
THREADS = 16
GPUCLOUD = Path(sys.executable).parent / "gpucloud"


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench cli", description=__doc__)
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--size-mib", type=int, default=1024)
    return parser


def _make_files(root: Path, count: int) -> list[Path]:
    paths = []
    for n in range(count):
        path = root / f"shard-{n // 1000:03d}" / f"{n:06d}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(64 + n % 64))
        paths.append(path)
    return paths


def _make_big(path: Path, size: int) -> None:
    with path.open("wb") as sink:
        for _ in range(size // MIB):
            sink.write(os.urandom(MIB))


def _timed(work: Callable[[], object]) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def _digest(path: Path) -> str:
    with path.open("rb") as source:
        return hashlib.file_digest(source, "sha256").hexdigest()


class Runner:
    def __init__(self, endpoint: str, api_key: str, home: Path) -> None:
        self._env = {**os.environ, "GPUCLOUD_ENDPOINT": endpoint, "GPUCLOUD_API_KEY": api_key,
                     "GPUCLOUD_CONFIG": str(home / "config.json")}  # fmt: skip

    def cp(self, *args: str) -> None:
        subprocess.run([str(GPUCLOUD), "cp", *args], env=self._env, check=True,
                       stdout=subprocess.DEVNULL)  # fmt: skip


def _pool(work: Callable[[Path], object], items: list[Path]) -> None:
    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(work, items))


async def main(args: argparse.Namespace) -> None:
    env = stack_env()
    admin = {"Authorization": f"Bearer {env['GPUCLOUD_BOOTSTRAP_ADMIN_KEY']}"}
    async with httpx.AsyncClient(base_url=env["GPUCLOUD_GATEWAY_URL"], timeout=300) as http:
        tenant_id, headers = await bench_tenant(http, admin, "bench-cli")
        try:
            storage = await object_storage(http, headers, 4 * args.size_mib * MIB + 10 * MIB)
            accessor = await http.post(
                f"/v1/storages/{storage['storageID']}/accessors",
                json={"mode": "read-write"}, headers=headers,
            )  # fmt: skip
            accessor.raise_for_status()
            credential = accessor.json()
            s3_endpoint = urlparse(credential["endpoint"])
            raw = Minio(
                s3_endpoint.netloc, access_key=credential["accessorID"],
                secret_key=credential["secretAccessKey"], secure=s3_endpoint.scheme == "https",
                region=credential["region"],
            )  # fmt: skip
            key = headers["Authorization"].removeprefix("Bearer ")
            with tempfile.TemporaryDirectory(prefix="bench-cli-") as scratch:
                await asyncio.to_thread(
                    _run, Path(scratch), Runner(env["GPUCLOUD_GATEWAY_URL"], key, Path(scratch)),
                    raw, storage["storageID"], storage["bucket"], args,
                )  # fmt: skip
        finally:
            await http.delete(f"/v1/tenants/{tenant_id}", headers=admin)


def _run(
    scratch: Path, cli: Runner, raw: Minio, storage: str, bucket: str, args: argparse.Namespace
) -> None:
    small = scratch / "small"
    files = _make_files(small, args.files)
    raw_up = _timed(lambda: _pool(
        lambda p: raw.fput_object(bucket, f"raw/{p.relative_to(small).as_posix()}", str(p)), files
    ))  # fmt: skip
    cli_up = _timed(lambda: cli.cp("-r", str(small), f"gpc://{storage}/cli/"))
    cli_up_again = _timed(lambda: cli.cp("-r", str(small), f"gpc://{storage}/cli/"))
    raw_back, cli_back = scratch / "raw-back", scratch / "cli-back"
    raw_down = _timed(lambda: _pool(
        lambda p: raw.fget_object(
            bucket, f"raw/{p.relative_to(small).as_posix()}",
            str(raw_back / p.relative_to(small)),
        ),
        files,
    ))  # fmt: skip
    cli_down = _timed(lambda: cli.cp("-r", f"gpc://{storage}/cli/", str(cli_back)))
    for path in files[:: max(1, len(files) // 100)]:  # a sample, byte for byte
        relative = path.relative_to(small)
        assert (
            (cli_back / relative).read_bytes()
            == path.read_bytes()
            == (raw_back / relative).read_bytes()
        )
    shutil.rmtree(small)

    big = scratch / "big.bin"
    _make_big(big, args.size_mib * MIB)
    raw_big_up = _timed(lambda: raw.fput_object(bucket, "raw-big.bin", str(big), part_size=64 * MIB,
                                                num_parallel_uploads=4))  # fmt: skip
    cli_big_up = _timed(lambda: cli.cp(str(big), f"gpc://{storage}/cli-big.bin"))
    cli_big_up_again = _timed(lambda: cli.cp(str(big), f"gpc://{storage}/cli-big.bin"))
    raw_big_down = _timed(lambda: raw.fget_object(bucket, "raw-big.bin", str(scratch / "raw-big")))
    cli_big_down = _timed(lambda: cli.cp(f"gpc://{storage}/cli-big.bin", str(scratch / "cli-big")))
    assert _digest(scratch / "cli-big") == _digest(big) == _digest(scratch / "raw-big")

    print(
        f"{args.files:,} small files (64-127 B), {THREADS} in flight; one {args.size_mib} MiB file"
    )
    print(f"{'':>22} {'gpucloud cp':>14} {'raw minio-py':>14} {'ratio':>7}")
    for label, ours, theirs, unit in (
        ("small files, upload", cli_up, raw_up, "files"),
        ("small files, again", cli_up_again, raw_up, "files"),
        ("small files, download", cli_down, raw_down, "files"),
        ("large file, upload", cli_big_up, raw_big_up, "MiB"),
        ("large file, again", cli_big_up_again, raw_big_up, "MiB"),
        ("large file, download", cli_big_down, raw_big_down, "MiB"),
    ):
        amount = args.files if unit == "files" else args.size_mib
        print(
            f"{label:>22} {amount / ours:>8.0f} {unit}/s {amount / theirs:>8.0f} {unit}/s"
            f" {theirs / ours:>6.2f}x   ({ours:.1f} s against {theirs:.1f} s)"
        )
