"""A one-node Ceph cluster behind object storages: a monitor, a manager, an OSD and RGW.

Each daemon runs in the foreground from the Debian packages that provision.py
unpacked into the cache, so the library, plugin and Python paths point there
(`tool_env`). Cephx is on: every daemon has its own key, made offline before the
monitor's first start and seeded into its database, so no daemon ever holds the
admin key. The OSD is BlueStore on a sparse file, so objects survive `down`/`up`
(decision 74 has the measurements behind its settings).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

from . import layout, probes, provision
from .errors import StackError
from .layout import HOST, PORTS

MON_ID = "a"
MGR_ID = "x"
RGW_CLIENT = "client.rgw.gpucloud"
#: The storage service's RGW user, which owns every platform bucket (docs/storage.md).
STORAGE_USER = "gpucloud-storage"
#: What rgw_backend.py calls and nothing more: bucket quotas and statistics
#: (/admin/bucket), accessors as users (/admin/user), their one-bucket policies
#: (PutUserPolicy). Not `metadata` (every user's and bucket's metadata), not `usage`.
STORAGE_USER_CAPS = "buckets=*;users=*;user-policy=*"
#: The OSD's BlueStore file: sparse, so only what is written takes disk space.
OSD_BLOCK_BYTES = 64 * 1024**3
#: BlueStore's floor for its memory autotuning; the default is 4 GiB.
OSD_MEMORY_TARGET = 1024**3


def _root() -> Path:
    return provision.CEPH.directory / "root"


def tool(name: str) -> str:
    return str(_root() / "usr" / "bin" / name)


def _data() -> Path:
    return layout.data_dir("ceph")


def conf_path() -> Path:
    return layout.etc_dir() / "ceph" / "ceph.conf"


def _keyring(name: str) -> Path:
    return layout.etc_dir() / "ceph" / f"ceph.{name}.keyring"


def tool_env() -> dict[str, str]:
    root = _root()
    libraries = [
        root / "usr/lib/x86_64-linux-gnu/ceph",
        root / "usr/lib/x86_64-linux-gnu",
        root / "lib/x86_64-linux-gnu",
        root / "usr/lib",
    ]
    return {
        "LD_LIBRARY_PATH": ":".join(map(str, libraries)),
        # The `ceph` CLI and the manager's modules are Python; Debian's build is 3.11.
        "PYTHONPATH": str(root / "usr/lib/python3/dist-packages"),
        "CEPH_CONF": str(conf_path()),
    }


def _tool(*argv: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        env={**os.environ, **tool_env()},
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )


def _run(component: str, *argv: str, timeout: float = 60.0) -> str:
    done = _tool(*argv, timeout=timeout)
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip()[-600:]
        raise StackError(component, f"`{' '.join(argv[:3])} …` failed: {detail}")
    return done.stdout


def cluster_json(*command: str) -> Any | None:
    """A `ceph` command's JSON answer as the admin, or None when the cluster does not answer."""
    try:
        done = _tool(
            tool("ceph"), "--connect-timeout", "3", *command, "--format", "json", timeout=10
        )
    except subprocess.TimeoutExpired:
        return None
    if done.returncode != 0 or not done.stdout.strip():
        return None
    return json.loads(done.stdout)


def _write_conf(fsid: str) -> None:
    root, data = _root(), _data()
    libs = root / "usr/lib/x86_64-linux-gnu"
    objectstore = os.environ.get("GPUCLOUD_CEPH_OBJECTSTORE", "bluestore")
    conf_path().parent.mkdir(parents=True, exist_ok=True)
    conf_path().write_text(
        f"""[global]
fsid = {fsid}
mon host = v2:{HOST}:{PORTS.ceph_mon}
public addr = {HOST}
ms bind ipv6 = false
auth cluster required = cephx
auth service required = cephx
auth client required = cephx
auth allow insecure global id reclaim = false
keyring = {layout.etc_dir() / "ceph"}/$cluster.$name.keyring
run dir = {data}/run
admin socket = {data}/run/$name.asok
plugin dir = {libs}/ceph
erasure code dir = {libs}/ceph/erasure-code
log to file = false
log to stderr = true
err to stderr = true
mon cluster log to file = false
# One OSD: a replica count of one, few placement groups, no warning about either.
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
mon allow pool size one = true
mon warn on pool no redundancy = false
mon data avail warn = 2
mon data avail crit = 1
osd crush chooseleaf type = 0

[mon]
mon data = {data}/mon/$id

[mgr]
mgr data = {data}/mgr/$id
mgr module path = {root}/usr/share/ceph/mgr

[osd]
osd data = {data}/osd/$id
osd objectstore = {objectstore}
osd class dir = {libs}/rados-classes
bluestore block path = {data}/osd/$id.block
bluestore block create = true
bluestore block size = {OSD_BLOCK_BYTES}
bluestore fsck on mkfs = false
osd memory target = {OSD_MEMORY_TARGET}
memstore device bytes = {4 * 1024**3}
# Two cores: one shard with two threads is the OSD's smallest sensible pool.
osd op num shards = 1
osd op num threads per shard = 2

[{RGW_CLIENT}]
rgw frontends = beast endpoint={HOST}:{PORTS.radosgw}
rgw data = {data}/rgw
rgw thread pool size = 64
debug rgw = 0
"""
    )


def _fsid() -> str:
    path = _data() / "fsid"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(str(uuid.uuid4()))
    return path.read_text().strip()


def _make_key(name: str, *caps: str) -> None:
    """A daemon's keyring, made offline; the monitor learns it at its first start."""
    keyring = _keyring(name)
    if keyring.exists():
        return
    argv = [tool("ceph-authtool"), "--create-keyring", str(keyring), "--gen-key", "-n", name]
    for cap in caps:
        service, _, allowed = cap.partition(" ")
        argv += ["--cap", service, allowed]
    _run("ceph-mon", *argv)
    keyring.chmod(0o600)


def prepare_daemon() -> None:
    """Every daemon's first step: the config, rewritten at each start (the cache path
    and the settings are in it)."""
    for directory in ("run", "mon", "mgr", "osd", "rgw"):
        (_data() / directory).mkdir(parents=True, exist_ok=True)
    _write_conf(_fsid())


def prepare_mon() -> None:
    """At the first start, every daemon's key and the monitor's database."""
    prepare_daemon()
    store = _data() / "mon" / MON_ID
    if (store / "store.db").exists():
        return
    _make_key("mon.", "mon allow *")
    _make_key("client.admin", "mon allow *", "osd allow *", "mgr allow *", "mds allow *")
    _make_key(f"mgr.{MGR_ID}", "mon allow profile mgr", "osd allow *", "mds allow *")
    _make_key("osd.0", "mon allow profile osd", "mgr allow profile osd", "osd allow *")
    _make_key(RGW_CLIENT, "mon allow rw", "osd allow rwx", "mgr allow rw")
    seed = _data() / "seed.keyring"
    seed.write_bytes(b"")
    seed.chmod(0o600)
    for name in ("mon.", "client.admin", f"mgr.{MGR_ID}", "osd.0", RGW_CLIENT):
        _run("ceph-mon", tool("ceph-authtool"), str(seed), "--import-keyring", str(_keyring(name)))
    monmap = _data() / "monmap"
    _run(
        "ceph-mon", tool("monmaptool"), "--create", "--clobber", "--fsid", _fsid(),
        "--addv", MON_ID, f"[v2:{HOST}:{PORTS.ceph_mon}]", str(monmap),
    )  # fmt: skip
    _run(
        "ceph-mon", tool("ceph-mon"), "--mkfs", "-i", MON_ID,
        "--monmap", str(monmap), "--keyring", str(seed),
    )  # fmt: skip
    seed.unlink()
    monmap.unlink()


#: How long a first start waits for the new monitor to answer. A cold start on a
#: busy 2-core machine once took longer than 60 s.
MONITOR_WAIT_S = 180.0


def _wait_for_monitor(component: str, timeout_s: float = MONITOR_WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    last = ""
    while time.monotonic() < deadline:
        if cluster_json("mon", "stat") is not None:
            return
        try:
            answer = _tool(tool("ceph"), "--connect-timeout", "3", "mon", "stat", timeout=10)
            last = (answer.stderr or answer.stdout).strip()[-300:]
        except subprocess.TimeoutExpired:
            last = "`ceph mon stat` timed out"
        time.sleep(0.5)
    raise StackError(
        component,
        f"the monitor did not answer within {timeout_s:.0f}s (last: {last or 'no output'}); "
        "see its log",
        layout.log_file("ceph-mon"),
    )


def prepare_osd() -> None:
    """Register the OSD with the monitor and lay out its store, once."""
    prepare_daemon()
    directory = _data() / "osd" / "0"
    if (directory / "whoami").exists():
        return
    _wait_for_monitor("ceph-osd")
    directory.mkdir(parents=True, exist_ok=True)
    fsid_file = directory / "osd-uuid"
    if not fsid_file.exists():
        fsid_file.write_text(str(uuid.uuid4()))
    osd_uuid = fsid_file.read_text().strip()
    # The key made at the monitor's first start becomes the OSD's registered key.
    key = _keyring("osd.0").read_text().split("key = ", 1)[1].split()[0]
    secrets = _data() / "osd-secrets.json"
    secrets.write_text(json.dumps({"cephx_secret": key}))
    secrets.chmod(0o600)
    try:
        osd_id = _run("ceph-osd", tool("ceph"), "osd", "new", osd_uuid, "-i", str(secrets)).strip()
    finally:
        secrets.unlink()
    if osd_id != "0":
        raise StackError("ceph-osd", f"the monitor numbered the OSD {osd_id}, not 0; run `reset`")
    _run("ceph-osd", tool("ceph-osd"), "-i", "0", "--mkfs", "--osd-uuid", osd_uuid, timeout=120)


def daemon_argv(binary: str, *identity: str) -> list[str]:
    return [tool(binary), "-f", "--conf", str(conf_path()), *identity]


def mon_healthy() -> bool:
    return probes.port_open(HOST, PORTS.ceph_mon)


def _listening(daemon: str) -> bool:
    """The daemon's own admin socket answers: the monitor's maps lag a stopped daemon
    by seconds, so they alone would call a stopped manager or OSD healthy."""
    return probes.unix_socket_open(_data() / "run" / f"{daemon}.asok")


def mgr_healthy() -> bool:
    if not _listening(f"mgr.{MGR_ID}"):
        return False
    state = cluster_json("mgr", "stat")
    return bool(state and state.get("available") and state.get("active_name") == MGR_ID)


def osd_healthy() -> bool:
    if not _listening("osd.0"):
        return False
    state = cluster_json("osd", "stat")
    return bool(state and state.get("num_up_osds", 0) >= 1)


def rgw_healthy() -> bool:
    # An anonymous ListBuckets: RGW answers it once its pools and zone exist.
    return probes.http_ok(f"http://{HOST}:{PORTS.radosgw}/")


def apply_storage_user(secret_key: str) -> str:
    """The storage service's RGW user, as the cluster admin (idempotent, every `up`).

    Its caps reach users (accessors are RGW users), bucket quotas and statistics,
    and user policies (an accessor's one-bucket policy); it is no system user.
    A user that is already right is left alone: rewriting it would drop the user
    policy the running storage service set on itself (rgw_backend.py).
    """
    admin = tool("radosgw-admin")
    info = _tool(admin, "user", "info", "--uid", STORAGE_USER, timeout=60)
    current = json.loads(info.stdout) if info.returncode == 0 else None
    keys = {(key["access_key"], key["secret_key"]) for key in (current or {}).get("keys", [])}
    held = {cap["type"]: cap["perm"] for cap in (current or {}).get("caps", [])}
    wanted = dict(cap.split("=", 1) for cap in STORAGE_USER_CAPS.split(";"))
    if current is None or (STORAGE_USER, secret_key) not in keys:
        verb = "modify" if current else "create"
        _run(
            "radosgw", admin, "user", verb, "--uid", STORAGE_USER,
            "--display-name", "gpucloud storage service",
            "--access-key", STORAGE_USER, "--secret-key", secret_key,
            "--max-buckets", "100000",
        )  # fmt: skip
    # A cap an older version granted and this one does not need is taken back.
    extra = ";".join(f"{kind}={perm}" for kind, perm in sorted(held.items()) if kind not in wanted)
    if extra:
        _run("radosgw", admin, "caps", "rm", "--uid", STORAGE_USER, "--caps", extra)
    if {kind: perm for kind, perm in held.items() if kind in wanted} != wanted:
        _run("radosgw", admin, "caps", "add", "--uid", STORAGE_USER, "--caps", STORAGE_USER_CAPS)
    return f"rgw access: user {STORAGE_USER} with caps {STORAGE_USER_CAPS}"
