"""Where things live: the binary cache, the data directory, versions and ports."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from .errors import StackError

REPO_ROOT = Path(__file__).resolve().parents[3]
LOCAL_DIR = REPO_ROOT / "deploy" / "local"

KAFKA_VERSION = "4.1.1"
FERRETDB_VERSION = "v1.24.2"
KUBERNETES_VERSION = "v1.34.4"
ETCD_VERSION = "v3.5.35"
KWOK_VERSION = "v0.7.0"
JOBSET_VERSION = "v0.11.0"
#: Not a server: renders the chart for its tests (tests/e2e/test_helm_chart.py).
HELM_VERSION = "v3.16.4"
#: Dex has no release on the Go proxy that builds; this commit of its main branch does.
DEX_VERSION = "v0.0.0-20260806151424-ab64ed778070"
MINIO_VERSION = "v0.0.0-20260212201848-7aac2a2c5b7c"
#: Debian bookworm's Ceph (Pacific); apt-get picks the archive's current build of it.
CEPH_VERSION = "16.2.15"
#: Debian 12's chromium, for the console's browser tests (not a server: unpacked only).
CHROMIUM_VERSION = "debian12"

HOST = "127.0.0.1"

#: Pod addresses of the embedded cluster, all in 127.0.0.0/8, so whatever the
#: platform dials at a pod (an instance's URL, a tunnel, a service's replica) stays
#: on this machine. Fleet nodes get a /24 each (`fleet_pod_cidr`); a node registered
#: without a podCIDR of its own, as the benchmarks' are, takes kwok's shared range.
#: Tests give their nodes 127.100.x.0/24 to 127.240.x.0/24.
KWOK_FALLBACK_CIDR = "127.32.0.0/16"
#: Instance and service hosts of the local stack: `*.localhost` resolves to loopback
#: in browsers without any DNS (RFC 6761).
INSTANCE_DOMAIN = "instances.localhost"


def fleet_pod_cidr(index: int, first_octet: int = 64) -> str:
    """The podCIDR of a fleet's `index`-th node: 127.64.0.0/24, 127.64.1.0/24, … (the
    second cluster's from 127.96.0.0/24: a pod's address names one cluster)."""
    return f"127.{first_octet + index // 256}.{index % 256}.0/24"


@dataclass(frozen=True)
class Ports:
    kafka: int = 9092
    kafka_controller: int = 9093
    ferretdb: int = 27017
    postgres: int = 5433
    etcd: int = 2379
    etcd_peer: int = 2380
    kube_apiserver: int = 6443
    kube_controller_manager: int = 10257
    kube_scheduler: int = 10259
    kwok: int = 10247
    jobset_webhook: int = 10263
    jobset_health: int = 10264
    minio: int = 9000
    minio_console: int = 9001
    ceph_mon: int = 3300
    radosgw: int = 7480
    gateway: int = 8000
    instances: int = 8001
    storage: int = 8002
    metering: int = 8003
    monitoring: int = 8004
    gpu_simulator: int = 8005


PORTS = Ports()


@dataclass(frozen=True)
class LocalCluster:
    """One of the stack's Kubernetes clusters: seed 000's two regions. Both share etcd
    (under a prefix each), the CA, the service-account keys and the token file; each
    has its own API server, controller manager, scheduler and kwok fleet."""

    name: str  # the platform's name for it (GPUCLOUD_CLUSTER_NAME for the first)
    region: str
    zones: tuple[str, ...]
    #: Appended to its components' names: kube-apiserver, kube-apiserver-local-2.
    suffix: str
    apiserver_port: int
    controller_manager_port: int
    scheduler_port: int
    kwok_port: int
    etcd_prefix: str
    #: Where a pod of a node without a podCIDR gets its address (loopback).
    kwok_cidr: str
    fleet_file: str  # under deploy/local
    #: The GPU simulator of its fleet: its fault API's port.
    simulator_port: int

    @property
    def server(self) -> str:
        return f"https://{HOST}:{self.apiserver_port}"


#: The cluster the instances service runs against (the home cluster).
LOCAL_1 = LocalCluster(
    name="local-1", region="local-1", zones=("zone-a", "zone-b"), suffix="",
    apiserver_port=PORTS.kube_apiserver, controller_manager_port=PORTS.kube_controller_manager,
    scheduler_port=PORTS.kube_scheduler, kwok_port=PORTS.kwok, etcd_prefix="/registry",
    kwok_cidr=KWOK_FALLBACK_CIDR, fleet_file="fleet.toml", simulator_port=PORTS.gpu_simulator,
)  # fmt: skip
#: The second region, registered through the API at `up`: GPUs the first lacks.
LOCAL_2 = LocalCluster(
    name="local-2", region="local-2", zones=("zone-c",), suffix="-local-2",
    apiserver_port=6444, controller_manager_port=10357, scheduler_port=10359, kwok_port=10347,
    etcd_prefix="/registry-local-2", kwok_cidr="127.33.0.0/16", fleet_file="fleet-local-2.toml",
    simulator_port=8015,
)  # fmt: skip


def object_store() -> Literal["minio", "ceph"]:
    """Which S3 store the stack runs for object storages: MinIO (the default, decision
    74) or a one-node Ceph cluster with RGW. Set GPUCLOUD_OBJECT_STORE=ceph."""
    chosen = os.environ.get("GPUCLOUD_OBJECT_STORE", "minio").strip().lower()
    if chosen not in {"minio", "ceph"}:
        raise StackError("object store", f"GPUCLOUD_OBJECT_STORE is {chosen!r}; use minio or ceph")
    return "ceph" if chosen == "ceph" else "minio"


def cache_dir() -> Path:
    """Built binaries, keyed by version; shared by every checkout on the machine."""
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "gpucloud"
    return Path(os.environ.get("GPUCLOUD_CACHE_DIR", default))


def home_dir() -> Path:
    """The one data directory: server data, logs, pid files, generated config and secrets
    (one per object store).

    As root it is /var/lib/gpucloud: PostgreSQL runs as the `postgres` user and
    must reach its data directory, which a path under /root would not allow.
    """
    if os.geteuid() == 0:
        default = Path("/var/lib/gpucloud")
    else:
        default = (
            Path(os.environ.get("XDG_DATA_HOME", Path.home() / ".local" / "share")) / "gpucloud"
        )
    home = Path(os.environ.get("GPUCLOUD_HOME", default))
    # A stack's database names the buckets of its one store, so each store keeps
    # its own data directory: <home> for MinIO, <home>-ceph for Ceph.
    return home.with_name(home.name + "-ceph") if object_store() == "ceph" else home


def data_dir(component: str) -> Path:
    return home_dir() / "data" / component


def log_file(component: str) -> Path:
    return home_dir() / "logs" / f"{component}.log"


def pid_file(component: str) -> Path:
    return home_dir() / "run" / f"{component}.pid"


def etc_dir() -> Path:
    return home_dir() / "etc"
