"""The components of the local stack: how each is prepared, started and probed."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from . import ceph, jobset, kube_access, layout, probes, provision
from .errors import StackError
from .layout import HOST, LOCAL_1, LOCAL_2, PORTS, LocalCluster
from .secrets import Secrets, ensure_kube_pki, issue_serving_cert, load_or_create


@dataclass(frozen=True)
class Context:
    secrets: Secrets
    pki: Path

    @property
    def kubeconfig(self) -> Path:
        return layout.etc_dir() / "kubeconfig"


@dataclass(frozen=True)
class Component:
    name: str
    kind: Literal["infra", "service"]
    argv: Callable[[Context], list[str]]
    healthy: Callable[[Context], bool]
    ports: tuple[int, ...]
    env: Callable[[Context], dict[str, str]] = field(default=lambda _ctx: {})
    prepare: Callable[[Context], None] = field(default=lambda _ctx: None)
    start_timeout_s: float = 90.0


def context() -> Context:
    ctx = Context(secrets=load_or_create(), pki=ensure_kube_pki())
    _write_kubeconfig(ctx)
    return ctx


def _write_kubeconfig(ctx: Context) -> None:
    for cluster in (LOCAL_1, LOCAL_2):
        kube_access.write_kubeconfig(
            admin_kubeconfig(ctx, cluster), "gpucloud-admin", ctx.secrets.kube_admin_token,
            ctx.pki / "ca.crt", server=cluster.server,
        )  # fmt: skip


# --- Kafka -------------------------------------------------------------------


#: The broker's super user: the broker itself and the operator's access step.
KAFKA_ADMIN = "gpucloud-admin"
#: The storage service's MinIO user: not root (gpucloud_storage.minio_access).
MINIO_STORAGE_USER = "gpucloud-storage"


def _kafka_config_dir() -> Path:
    return layout.etc_dir() / "kafka"


def _kafka_java(ctx: Context, main: str, *args: str) -> list[str]:
    java = shutil.which("java") or "java"
    libs = provision.KAFKA.directory / "libs"
    return [
        java, "-Xms256m", "-Xmx768m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={_kafka_config_dir() / 'log4j2.properties'}",
        "-cp", f"{libs}/*", main, *args,
    ]  # fmt: skip


def _kafka_prepare(ctx: Context) -> None:
    config = _kafka_config_dir()
    config.mkdir(parents=True, exist_ok=True)
    data = layout.data_dir("kafka")
    # Every listener authenticates (docs/kafka.md): services with SCRAM as their own
    # principal, the broker itself and the operator's access step as the PLAIN super
    # user, whose password lives only in this 0600 file and the stack's secrets.
    admin = ctx.secrets.kafka_admin_password
    plain = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="{KAFKA_ADMIN}" password="{admin}" user_{KAFKA_ADMIN}="{admin}";'
    )
    properties = config / "server.properties"
    properties.touch(mode=0o600)
    properties.write_text(
        f"""process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers={HOST}:{PORTS.kafka_controller}
listeners=SASL_PLAINTEXT://{HOST}:{PORTS.kafka},CONTROLLER://{HOST}:{PORTS.kafka_controller}
advertised.listeners=SASL_PLAINTEXT://{HOST}:{PORTS.kafka}
controller.listener.names=CONTROLLER
inter.broker.listener.name=SASL_PLAINTEXT
listener.security.protocol.map=CONTROLLER:SASL_PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT
sasl.enabled.mechanisms=SCRAM-SHA-256,PLAIN
sasl.mechanism.inter.broker.protocol=PLAIN
sasl.mechanism.controller.protocol=PLAIN
listener.name.controller.sasl.enabled.mechanisms=PLAIN
listener.name.controller.plain.sasl.jaas.config={plain}
listener.name.sasl_plaintext.plain.sasl.jaas.config={plain}
listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:{KAFKA_ADMIN}
allow.everyone.if.no.acl.found=false
log.dirs={data}
num.partitions=3
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
log.retention.hours=168
"""
    )
    (config / "log4j2.properties").write_text(
        """status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.stdout.ref = STDOUT
logger.kafka.name = kafka
logger.kafka.level = WARN
logger.server.name = kafka.server.KafkaRaftServer
logger.server.level = INFO
"""
    )
    if (data / "meta.properties").exists():
        return
    data.mkdir(parents=True, exist_ok=True)
    cluster_id = subprocess.run(
        _kafka_java(ctx, "kafka.tools.StorageTool", "random-uuid"),
        check=True, capture_output=True, text=True,
    ).stdout.strip().splitlines()[-1]  # fmt: skip
    subprocess.run(
        _kafka_java(ctx, "kafka.tools.StorageTool", "format", "-t", cluster_id,
                    "-c", str(config / "server.properties"), "--standalone"),
        check=True, capture_output=True, text=True,
    )  # fmt: skip


KAFKA = Component(
    name="kafka",
    kind="infra",
    prepare=_kafka_prepare,
    argv=lambda ctx: _kafka_java(
        ctx, "kafka.Kafka", str(_kafka_config_dir() / "server.properties")
    ),
    healthy=lambda _ctx: probes.kafka_ok(HOST, PORTS.kafka),
    ports=(PORTS.kafka, PORTS.kafka_controller),
)

# --- PostgreSQL (FerretDB's storage) -----------------------------------------------
#
# FerretDB on PostgreSQL rather than SQLite: with SQLite it pushes only `_id`
# equality down, so every other query scans the collection; on PostgreSQL,
# equality on an indexed field is an index lookup.

POSTGRES_USER = "gpucloud"


def _postgres_bin(tool: str) -> str:
    found = shutil.which("pg_config")
    if found:
        bindir = subprocess.run(
            [found, "--bindir"], capture_output=True, text=True, check=False
        ).stdout.strip()
        if bindir and Path(bindir, tool).exists():
            return str(Path(bindir, tool))
    for candidate in sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{tool}"), reverse=True):
        return str(candidate)
    raise StackError(
        "postgres",
        f"PostgreSQL's `{tool}` was not found; install PostgreSQL 15 (apt-get install postgresql-15)",
    )


def _as_server_user(argv: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root; when we are root it runs as `postgres`."""
    if os.geteuid() != 0:
        return argv
    runuser = shutil.which("runuser")
    if runuser is None:
        raise StackError(
            "postgres",
            "running as root needs `runuser` (util-linux) to start PostgreSQL as `postgres`",
        )
    return [runuser, "-u", "postgres", "--", *argv]


def _postgres_prepare(ctx: Context) -> None:
    data = layout.data_dir("postgres")
    if (data / "PG_VERSION").exists():
        return
    data.mkdir(parents=True, exist_ok=True)
    data.chmod(0o700)
    data.parent.chmod(0o755)  # etcd creates it 0700; the server user must pass through
    # initdb reads the password from a file that the server user can open.
    password_file = data.parent / ".postgres-password"
    fd = os.open(password_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(ctx.secrets.postgres_password + "\n")
    if os.geteuid() == 0:
        shutil.chown(data, "postgres")
        shutil.chown(password_file, "postgres")
    try:
        subprocess.run(
            _as_server_user([_postgres_bin("initdb"), "-D", str(data), "-U", POSTGRES_USER, "-E", "UTF8",
                             "--auth=scram-sha-256", f"--pwfile={password_file}", "--no-instructions"]),
            check=True, capture_output=True, text=True,
        )  # fmt: skip
    finally:
        password_file.unlink(missing_ok=True)


def _postgres_ready(_ctx: Context) -> bool:
    ready = subprocess.run(
        [_postgres_bin("pg_isready"), "-q", "-h", HOST, "-p", str(PORTS.postgres)], check=False
    )
    return ready.returncode == 0


def _postgres_argv(_ctx: Context) -> list[str]:
    return _as_server_user(
        [
            _postgres_bin("postgres"),
            "-D",
            str(layout.data_dir("postgres")),
            "-p",
            str(PORTS.postgres),
            "-c",
            f"listen_addresses={HOST}",
            "-c",
            "unix_socket_directories=",
            "-c",
            "max_connections=200",
        ]
    )


POSTGRES = Component(
    name="postgres",
    kind="infra",
    prepare=_postgres_prepare,
    argv=_postgres_argv,
    healthy=_postgres_ready,
    ports=(PORTS.postgres,),
)

# --- FerretDB (MongoDB wire protocol on PostgreSQL) ----------------------------------


def _postgres_url(ctx: Context, database: str) -> str:
    return f"postgres://{POSTGRES_USER}:{ctx.secrets.postgres_password}@{HOST}:{PORTS.postgres}/{database}"


def _ferretdb_prepare(ctx: Context) -> None:
    """FerretDB needs its database to exist; PostgreSQL may still be starting."""
    deadline = time.monotonic() + 60
    while not _postgres_ready(ctx):
        if time.monotonic() > deadline:
            raise StackError(
                "ferretdb", "PostgreSQL did not become ready", layout.log_file("postgres")
            )
        time.sleep(0.25)
    env = {**os.environ, "PGPASSWORD": ctx.secrets.postgres_password}
    psql = [
        _postgres_bin("psql"),
        "-h",
        HOST,
        "-p",
        str(PORTS.postgres),
        "-U",
        POSTGRES_USER,
        "-d",
        "postgres",
        "-tAc",
    ]
    exists = subprocess.run([*psql, "SELECT 1 FROM pg_database WHERE datname = 'ferretdb'"],
                            env=env, capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    if not exists:
        subprocess.run(
            [*psql, "CREATE DATABASE ferretdb"], env=env, capture_output=True, text=True, check=True
        )
    # GIN indexes beside FerretDB's own, so its pushed-down equalities use an index.
    indexes = subprocess.run(
        [*psql[:-3], "-d", "ferretdb", "-v", "ON_ERROR_STOP=1", "-q",
         "-f", str(Path(__file__).with_name("ferretdb_indexes.sql"))],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if indexes.returncode != 0:
        raise StackError(
            "ferretdb", f"installing the pushdown indexes failed: {indexes.stderr.strip()}"
        )


FERRETDB = Component(
    name="ferretdb",
    kind="infra",
    prepare=_ferretdb_prepare,
    argv=lambda _ctx: [
        str(provision.FERRETDB.path("ferretdb")),
        f"-listen-addr={HOST}:{PORTS.ferretdb}",
        "-handler=postgresql",
        # warn logs every failed command in full (drivers send endSessions,
        # which FerretDB lacks), so the log only keeps errors.
        "-log-level=error",
    ],
    env=lambda ctx: {"FERRETDB_POSTGRESQL_URL": _postgres_url(ctx, "ferretdb")},
    healthy=lambda _ctx: probes.mongo_ok(HOST, PORTS.ferretdb),
    ports=(PORTS.ferretdb,),
)

# --- Kubernetes control plane ------------------------------------------------------

ETCD = Component(
    name="etcd",
    kind="infra",
    argv=lambda _ctx: [
        str(provision.ETCD.path("etcd")),
        "--name=gpucloud",
        f"--data-dir={layout.data_dir('etcd')}",
        f"--listen-client-urls=http://{HOST}:{PORTS.etcd}",
        f"--advertise-client-urls=http://{HOST}:{PORTS.etcd}",
        f"--listen-peer-urls=http://{HOST}:{PORTS.etcd_peer}",
        f"--initial-advertise-peer-urls=http://{HOST}:{PORTS.etcd_peer}",
        f"--initial-cluster=gpucloud=http://{HOST}:{PORTS.etcd_peer}",
        "--quota-backend-bytes=4294967296",
        "--log-level=warn",
    ],
    healthy=lambda _ctx: probes.http_ok(f"http://{HOST}:{PORTS.etcd}/health"),
    ports=(PORTS.etcd, PORTS.etcd_peer),
)


def _token_file(ctx: Context) -> Path:
    path = layout.etc_dir() / "kube-tokens.csv"
    services = "".join(
        f"{token},{kube_access.user(service)},{kube_access.user(service)}\n"
        for service, token in ctx.secrets.kube_tokens.items()
    )
    path.write_text(
        f'{ctx.secrets.kube_admin_token},gpucloud-admin,gpucloud-admin,"system:masters"\n'
        + services
    )
    path.chmod(0o600)
    return path


def admin_kubeconfig(ctx: Context, cluster: LocalCluster) -> Path:
    """The cluster admin's kubeconfig of `cluster` (the first's is `ctx.kubeconfig`)."""
    if cluster is LOCAL_1:
        return ctx.kubeconfig
    return layout.etc_dir() / f"kubeconfig{cluster.suffix}"


def _apiserver(cluster: LocalCluster) -> Component:
    return Component(
        name=f"kube-apiserver{cluster.suffix}",
        kind="infra",
        argv=lambda ctx: [
            str(provision.KUBERNETES.path("kube-apiserver")),
            f"--etcd-servers=http://{HOST}:{PORTS.etcd}",
            f"--etcd-prefix={cluster.etcd_prefix}",
            f"--bind-address={HOST}",
            f"--advertise-address={HOST}",
            f"--secure-port={cluster.apiserver_port}",
            f"--tls-cert-file={ctx.pki / 'apiserver.crt'}",
            f"--tls-private-key-file={ctx.pki / 'apiserver.key'}",
            f"--token-auth-file={_token_file(ctx)}",
            "--authorization-mode=RBAC",
            "--service-cluster-ip-range=10.96.0.0/16",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={ctx.pki / 'sa.pub'}",
            f"--service-account-signing-key-file={ctx.pki / 'sa.key'}",
            "--allow-privileged=true",
            # Pod logs come from the kubelet at the node's address: kwok serves them for
            # every fake node at one loopback address (see _kwok).
            "--kubelet-preferred-address-types=InternalIP",
            "--profiling=false",
            "--v=0",
        ],
        healthy=lambda ctx: probes.http_ok(
            f"{cluster.server}/readyz", token=ctx.secrets.kube_admin_token, ca=ctx.pki / "ca.crt"
        ),
        ports=(cluster.apiserver_port,),
        start_timeout_s=120.0,
    )


def _controller_manager(cluster: LocalCluster) -> Component:
    return Component(
        name=f"kube-controller-manager{cluster.suffix}",
        kind="infra",
        argv=lambda ctx: [
            str(provision.KUBERNETES.path("kube-controller-manager")),
            f"--kubeconfig={admin_kubeconfig(ctx, cluster)}",
            f"--bind-address={HOST}",
            f"--secure-port={cluster.controller_manager_port}",
            "--leader-elect=false",
            f"--service-account-private-key-file={ctx.pki / 'sa.key'}",
            f"--root-ca-file={ctx.pki / 'ca.crt'}",
            # kwok renews every fake node's lease from this one machine. During a burst
            # of starts at 1,000 nodes, renewals fell a minute behind, the default 50 s
            # grace marked the nodes NotReady, and their pods were marked NotReady for
            # good (kwok never restores a pod's Ready condition). Real kubelets renew
            # from their own machines; the Helm chart leaves the cluster's defaults.
            "--node-monitor-grace-period=180s",
            "--profiling=false",
            "--v=0",
        ],
        healthy=lambda _ctx: probes.http_ok(
            f"https://{HOST}:{cluster.controller_manager_port}/healthz"
        ),
        ports=(cluster.controller_manager_port,),
    )


def _scheduler(cluster: LocalCluster) -> Component:
    return Component(
        name=f"kube-scheduler{cluster.suffix}",
        kind="infra",
        argv=lambda ctx: [
            str(provision.KUBERNETES.path("kube-scheduler")),
            f"--kubeconfig={admin_kubeconfig(ctx, cluster)}",
            f"--bind-address={HOST}",
            f"--secure-port={cluster.scheduler_port}",
            "--leader-elect=false",
            "--profiling=false",
            "--v=0",
        ],
        healthy=lambda _ctx: probes.http_ok(f"https://{HOST}:{cluster.scheduler_port}/healthz"),
        ports=(cluster.scheduler_port,),
    )


def _kwok_config() -> Path:
    return layout.etc_dir() / "kwok.yaml"


def _write_kwok_config(_ctx: Context) -> None:
    """kwok_config.yaml, plus the log every fake container serves: kwok wants that
    file's absolute path, which depends on where the repository is."""
    log = Path(__file__).with_name("kwok_workload.log")
    _kwok_config().write_text(
        Path(__file__).with_name("kwok_config.yaml").read_text()
        + "---\napiVersion: kwok.x-k8s.io/v1alpha1\nkind: ClusterLogs\n"
        + "metadata:\n  name: simulated-workload\n"
        + f"spec:\n  logs:\n  - containers: [workload]\n    logsFile: {json.dumps(str(log))}\n"
    )


def _kwok(cluster: LocalCluster) -> Component:
    return Component(
        name=f"kwok{cluster.suffix}",
        kind="infra",
        prepare=_write_kwok_config,
        argv=lambda ctx: [
            str(provision.KWOK.path("kwok")),
            f"--kubeconfig={admin_kubeconfig(ctx, cluster)}",
            "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            # Heartbeat through node leases, as kubelets do; without them the node
            # lifecycle controller sees every node NotReady between status updates.
            # kwok renews each lease every quarter of its duration: at 40 s, 1,000
            # nodes made 100 lease writes a second through the API server and etcd.
            "--node-lease-duration-seconds=120",
            f"--server-address={HOST}:{cluster.kwok_port}",
            # Its own pod stages plus ours, which end batch jobs' pods on cue, and the
            # log every fake container serves.
            f"--config={_kwok_config()}",
            # Pods of a node without a podCIDR of its own get loopback addresses too:
            # whatever the platform dials at a pod's address stays on this machine.
            f"--cidr={cluster.kwok_cidr}",
            # Every fake node's kubelet is kwok itself: the API server reaches it there
            # for pod logs (a new node takes these; `reset` re-registers the fleet).
            f"--node-ip={HOST}",
            f"--node-port={cluster.kwok_port}",
        ],
        healthy=lambda _ctx: probes.http_ok(f"http://{HOST}:{cluster.kwok_port}/healthz"),
        ports=(cluster.kwok_port,),
    )


KUBE_APISERVER, KUBE_CONTROLLER_MANAGER, KUBE_SCHEDULER, KWOK = (
    _apiserver(LOCAL_1),
    _controller_manager(LOCAL_1),
    _scheduler(LOCAL_1),
    _kwok(LOCAL_1),
)
#: The second cluster's control plane and fleet (seed 000's second region).
SECOND_CLUSTER: tuple[Component, ...] = (
    _apiserver(LOCAL_2),
    _controller_manager(LOCAL_2),
    _scheduler(LOCAL_2),
    _kwok(LOCAL_2),
)
#: Each cluster by its API server and its kwok component.
CLUSTER_OF = {
    component.name: cluster
    for cluster, components in (
        (LOCAL_1, (KUBE_APISERVER, KWOK)),
        (LOCAL_2, (SECOND_CLUSTER[0], SECOND_CLUSTER[3])),
    )
    for component in components
}

# --- JobSet ------------------------------------------------------------------------


def _jobset_dir() -> Path:
    return layout.etc_dir() / "jobset"


def _prepare_jobset(ctx: Context) -> None:
    """The controller's configuration and serving certificate, then its CRD and webhooks
    (server-side applied, so a new JobSet version updates them)."""
    directory = _jobset_dir()
    certs = directory / "certs"
    issue_serving_cert(ctx.pki, certs, "jobset-webhook")
    (directory / "config.yaml").write_text(
        jobset.controller_config(
            webhook_host=HOST,
            webhook_port=PORTS.jobset_webhook,
            certs=str(certs),
            health=f"{HOST}:{PORTS.jobset_health}",
        )
    )
    crd = provision.JOBSET.path("jobset.x-k8s.io_jobsets.yaml").read_text()
    kube_access.server_side_apply(
        ctx.pki / "ca.crt", ctx.secrets.kube_admin_token, jobset.CRD_PATH, crd
    )
    # Its webhooks, reached at the controller's own address: it runs on this machine.
    ca_bundle = base64.b64encode((ctx.pki / "ca.crt").read_bytes()).decode()
    base_url = f"https://{HOST}:{PORTS.jobset_webhook}"
    for path, manifest in jobset.webhook_configurations(base_url, ca_bundle):
        kube_access.server_side_apply(
            ctx.pki / "ca.crt", ctx.secrets.kube_admin_token, path, json.dumps(manifest)
        )


#: JobSet (sigs.k8s.io/jobset) runs multi-node jobs: a group of Jobs created, and
#: restarted, together. Started after the control plane: its CRD must be there.
JOBSET = Component(
    name="jobset",
    kind="infra",
    prepare=_prepare_jobset,
    argv=lambda ctx: [
        str(provision.JOBSET.path("jobset")),
        f"--kubeconfig={ctx.kubeconfig}",
        f"--config={_jobset_dir() / 'config.yaml'}",
        "--zap-log-level=info",
    ],
    healthy=lambda _ctx: probes.http_ok(f"http://{HOST}:{PORTS.jobset_health}/readyz"),
    ports=(PORTS.jobset_webhook, PORTS.jobset_health),
)

# --- Object storage -------------------------------------------------------------

MINIO = Component(
    name="minio",
    kind="infra",
    prepare=lambda _ctx: layout.data_dir("minio").mkdir(parents=True, exist_ok=True),
    argv=lambda _ctx: [
        str(provision.MINIO.path("minio")),
        "server",
        f"--address={HOST}:{PORTS.minio}",
        f"--console-address={HOST}:{PORTS.minio_console}",
        str(layout.data_dir("minio")),
    ],
    env=lambda ctx: {
        "MINIO_ROOT_USER": ctx.secrets.minio_root_user,
        "MINIO_ROOT_PASSWORD": ctx.secrets.minio_root_password,
        "MINIO_UPDATE": "off",
        "MINIO_BROWSER": "off",
        # Bucket usage (for quotas and metering) comes from MinIO's scanner: keep it
        # minutes fresher than the default, a local stack holds little data.
        "MINIO_SCANNER_SPEED": "fastest",
        "MINIO_SCANNER_CYCLE": "5s",
    },
    healthy=lambda _ctx: probes.http_ok(f"http://{HOST}:{PORTS.minio}/minio/health/ready"),
    ports=(PORTS.minio, PORTS.minio_console),
)


def _ceph_daemon(
    name: str,
    identity: tuple[str, ...],
    healthy: Callable[[], bool],
    *,
    prepare: Callable[[], None] = ceph.prepare_daemon,
    ports: tuple[int, ...] = (),
    start_timeout_s: float = 90.0,
) -> Component:
    """One Ceph daemon in the foreground, its binary named after it (ceph.py)."""
    return Component(
        name=name,
        kind="infra",
        prepare=lambda _ctx: prepare(),
        argv=lambda _ctx: ceph.daemon_argv(name, *identity),
        env=lambda _ctx: ceph.tool_env(),
        healthy=lambda _ctx: healthy(),
        ports=ports,
        start_timeout_s=start_timeout_s,
    )


CEPH_MON = _ceph_daemon(
    "ceph-mon", ("-i", ceph.MON_ID), ceph.mon_healthy,
    prepare=ceph.prepare_mon, ports=(PORTS.ceph_mon,),
)  # fmt: skip
CEPH_MGR = _ceph_daemon("ceph-mgr", ("-i", ceph.MGR_ID), ceph.mgr_healthy)
CEPH_OSD = _ceph_daemon(
    "ceph-osd", ("-i", "0"), ceph.osd_healthy, prepare=ceph.prepare_osd, start_timeout_s=180.0
)
RADOSGW = _ceph_daemon(
    "radosgw", ("-n", ceph.RGW_CLIENT), ceph.rgw_healthy,
    ports=(PORTS.radosgw,), start_timeout_s=180.0,
)  # fmt: skip
CEPH = (CEPH_MON, CEPH_MGR, CEPH_OSD, RADOSGW)


def object_store() -> tuple[Component, ...]:
    """The S3 store's components: MinIO, or Ceph's four daemons (layout.object_store())."""
    return CEPH if layout.object_store() == "ceph" else (MINIO,)


def s3_endpoint() -> str:
    port = PORTS.radosgw if layout.object_store() == "ceph" else PORTS.minio
    return f"http://{HOST}:{port}"


# --- gpucloud services -----------------------------------------------------------

SERVICE_NAMES = ("gateway", "instances", "storage", "metering", "monitoring")


def service_port(name: str) -> int:
    return int(getattr(PORTS, name))


def _common_env(ctx: Context) -> dict[str, str]:
    """What every service, and the operator, needs to reach the stack: no credentials."""
    urls = {
        f"GPUCLOUD_{name.upper()}_URL": f"http://{HOST}:{service_port(name)}"
        for name in SERVICE_NAMES
    }
    return {
        # Nothing the stack dials may leave this machine (gpucloud_libs/egress.py).
        "GPUCLOUD_LOOPBACK_ONLY": "true",
        # Instance and service URLs a browser here opens with no DNS: `*.localhost` is
        # loopback (RFC 6761), and the gateway listens on its own port over http.
        # Browsers treat these hosts as secure, so the `__Host-` cookie still holds.
        "GPUCLOUD_INSTANCE_DOMAIN": layout.INSTANCE_DOMAIN,
        "GPUCLOUD_INSTANCE_URL_SCHEME": "http",
        "GPUCLOUD_INSTANCE_URL_PORT": str(PORTS.gateway),
        "GPUCLOUD_KAFKA_BOOTSTRAP": f"{HOST}:{PORTS.kafka}",
        "GPUCLOUD_MONGODB_URI": f"mongodb://{HOST}:{PORTS.ferretdb}/",
        "GPUCLOUD_KUBECONFIG": str(ctx.kubeconfig),
        "GPUCLOUD_S3_ENDPOINT": s3_endpoint(),
        # Every service verifies identities; only signers hold a private key.
        "GPUCLOUD_IDENTITY_PUBLIC_KEYS": json.dumps(
            {signer: pair["public"] for signer, pair in ctx.secrets.identity_keys.items()}
        ),
        **urls,
    }


def service_env(ctx: Context) -> dict[str, str]:
    """The operator's settings (`make env`, the tests, the benchmarks, the access steps):
    the Kafka and MinIO super users, the bootstrap admin key, the simulator token.

    On Ceph the S3 keys are the storage user's, the owner of every platform bucket:
    RGW's super user is the cluster's admin keyring (`radosgw-admin`), not an S3 key.
    """
    if layout.object_store() == "ceph":
        s3_keys = (ceph.STORAGE_USER, ctx.secrets.minio_storage_password)
    else:
        s3_keys = (ctx.secrets.minio_root_user, ctx.secrets.minio_root_password)
    return {
        **_common_env(ctx),
        "GPUCLOUD_KAFKA_USERNAME": KAFKA_ADMIN,
        "GPUCLOUD_KAFKA_PASSWORD": ctx.secrets.kafka_admin_password,
        # SCRAM: the access step gives the super user a SCRAM credential too.
        "GPUCLOUD_KAFKA_SASL_MECHANISM": "SCRAM-SHA-256",
        "GPUCLOUD_S3_ACCESS_KEY": s3_keys[0],
        "GPUCLOUD_S3_SECRET_KEY": s3_keys[1],
        "GPUCLOUD_OBJECT_STORE": layout.object_store(),
        "GPUCLOUD_BOOTSTRAP_ADMIN_KEY": ctx.secrets.bootstrap_admin_key,
        "GPUCLOUD_SIMULATOR_TOKEN": ctx.secrets.simulator_token,
        # For the tests and benchmarks that publish telemetry as simulated nodes.
        "GPUCLOUD_TELEMETRY_SECRET": ctx.secrets.telemetry_secret,
    }


def principal_env(ctx: Context, service: str) -> dict[str, str]:
    """The settings `service` runs with: its own Kafka principal, and only the secrets
    that are its alone (docs/security.md)."""
    own: dict[str, str] = {}
    if service in ctx.secrets.identity_keys:
        own["GPUCLOUD_IDENTITY_PRIVATE_KEY"] = ctx.secrets.identity_keys[service]["private"]
    if service == "gateway":
        own["GPUCLOUD_SESSION_SECRET"] = ctx.secrets.session_secret
        own["GPUCLOUD_BOOTSTRAP_ADMIN_KEY"] = ctx.secrets.bootstrap_admin_key
    if service in ctx.secrets.kube_tokens:
        token = ctx.secrets.kube_tokens[service]
        own["GPUCLOUD_KUBECONFIG"] = str(kube_access.kubeconfig(service, token, ctx.pki / "ca.crt"))
    if service == "storage":
        own["GPUCLOUD_OBJECT_STORE"] = "rgw" if layout.object_store() == "ceph" else "minio"
        own["GPUCLOUD_S3_ACCESS_KEY"] = MINIO_STORAGE_USER
        own["GPUCLOUD_S3_SECRET_KEY"] = ctx.secrets.minio_storage_password
        own["GPUCLOUD_STORAGE_SECRETS_KEY"] = ctx.secrets.storage_secrets_key
    if service == "monitoring":
        own["GPUCLOUD_WEBHOOK_SECRETS_KEY"] = ctx.secrets.webhook_secrets_key
        own["GPUCLOUD_TELEMETRY_SECRET"] = ctx.secrets.telemetry_secret
        own["GPUCLOUD_AGENT_SERVICE_ACCOUNTS"] = json.dumps([kube_access.AGENT_ACCOUNT])
    if service == "instances":
        own["GPUCLOUD_REGISTRY_SECRETS_KEY"] = ctx.secrets.registry_secrets_key
        own["GPUCLOUD_CLUSTER_SECRETS_KEY"] = ctx.secrets.cluster_secrets_key
    if service == "agent":
        own["GPUCLOUD_SIMULATOR_TOKEN"] = ctx.secrets.simulator_token
        own["GPUCLOUD_TELEMETRY_SECRET"] = ctx.secrets.telemetry_secret
    return {
        **_common_env(ctx),
        "GPUCLOUD_KAFKA_USERNAME": f"gpucloud-{service}",
        "GPUCLOUD_KAFKA_PASSWORD": ctx.secrets.kafka_passwords[service],
        "GPUCLOUD_KAFKA_SASL_MECHANISM": "SCRAM-SHA-256",
        **own,
    }


def _run_access_step(ctx: Context, component: str, module: str, extra: dict[str, str]) -> str:
    """An operator's idempotent step (Kafka, MinIO), run with the venv's Python."""
    done = subprocess.run(
        [_venv_python(), "-m", module],
        env={**os.environ, **service_env(ctx), **extra},
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip()[-800:]
        raise StackError(component, f"the access step failed: {detail}")
    return done.stdout.strip()


def apply_minio_access(ctx: Context) -> str:
    """The storage service's own MinIO user and policy, as root (gpucloud_storage.minio_access)."""
    return _run_access_step(
        ctx, "minio", "gpucloud_storage.minio_access",
        {"GPUCLOUD_MINIO_STORAGE_USER": MINIO_STORAGE_USER,
         "GPUCLOUD_MINIO_STORAGE_PASSWORD": ctx.secrets.minio_storage_password},
    )  # fmt: skip


def apply_rgw_access(ctx: Context) -> str:
    """The storage service's own RGW user, as the cluster admin (ceph.py)."""
    return ceph.apply_storage_user(ctx.secrets.minio_storage_password)


def apply_kube_access(ctx: Context, cluster: LocalCluster = LOCAL_1) -> str:
    """The services' Kubernetes roles and the admission policy (kube_access.py), in
    `cluster`."""
    applied = kube_access.apply(ctx.pki / "ca.crt", ctx.secrets.kube_admin_token, cluster.server)
    return f"kube access: {applied} roles, bindings and policies for {len(ctx.secrets.kube_tokens)} users"


def register_second_cluster(ctx: Context) -> str:
    """Register the second cluster with the platform, as the operator would (POST
    /v1/clusters), with the instances service's own kubeconfig for it, and give the
    storage service its own (PUT /v1/storage-clusters/local-2); one already registered
    is left as it is."""
    kubeconfigs = {}
    for service in ("instances", "storage"):
        path = layout.etc_dir() / f"kubeconfig-{service}{LOCAL_2.suffix}"
        kube_access.write_kubeconfig(
            path, kube_access.user(service), ctx.secrets.kube_tokens[service],
            ctx.pki / "ca.crt", server=LOCAL_2.server,
        )  # fmt: skip
        kubeconfigs[service] = path.read_text()
    body = {
        "name": LOCAL_2.name, "region": LOCAL_2.region, "zones": list(LOCAL_2.zones),
        "kubeconfig": kubeconfigs["instances"],
    }  # fmt: skip
    said = _as_operator(ctx, "POST", "/v1/clusters", body, already=409)
    _as_operator(ctx, "PUT", f"/v1/storage-clusters/{LOCAL_2.name}",
                 {"kubeconfig": kubeconfigs["storage"]})  # fmt: skip
    if said is None:
        return f"cluster {LOCAL_2.name} registered already"
    return f"cluster {LOCAL_2.name} registered (region {LOCAL_2.region}), with storage access"


def _as_operator(
    ctx: Context, method: str, path: str, body: dict[str, Any], *, already: int | None = None
) -> bytes | None:
    """Call the API as the bootstrap admin; None when it answers `already`."""
    request = urllib.request.Request(
        f"http://{HOST}:{PORTS.gateway}{path}", data=json.dumps(body).encode(), method=method,
        headers={"Authorization": f"Bearer {ctx.secrets.bootstrap_admin_key}",
                 "Content-Type": "application/json"},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            answer: bytes = response.read()
            return answer
    except urllib.error.HTTPError as error:
        if error.code == already:
            return None
        detail = error.read().decode(errors="replace")[-800:]
        raise StackError("gateway", f"{method} {path} failed: {detail}") from None


def apply_kafka_access(ctx: Context) -> str:
    """Set the services' Kafka passwords, create the topics and grant the ACLs, as the
    admin principal (gpucloud_libs.kafka_access); idempotent, run at every `up`."""
    passwords = {
        f"GPUCLOUD_KAFKA_PASSWORD_{service.upper()}": password
        for service, password in ctx.secrets.kafka_passwords.items()
    }
    # PLAIN: the broker's static super user, the one login that works before any
    # SCRAM credential exists.
    plain = {"GPUCLOUD_KAFKA_SASL_MECHANISM": "PLAIN"}
    return _run_access_step(ctx, "kafka", "gpucloud_libs.kafka_access", {**passwords, **plain})


#: Local-stack settings of single services: quicker rounds than production defaults,
#: so the demo and the tests see results in seconds.
_SERVICE_SETTINGS: dict[str, dict[str, str]] = {
    "storage": {"GPUCLOUD_USAGE_INTERVAL_S": "5", "GPUCLOUD_SWEEP_INTERVAL_S": "5"},
    "metering": {"GPUCLOUD_USAGE_SETTLE_S": "5"},
    # The storage service's rights in each tenant namespace (kube_access.py).
    # The home cluster (the embedded one) as seed 000's first region names it.
    "instances": {
        "GPUCLOUD_TENANT_STORAGE_SUBJECT": kube_access.STORAGE_SUBJECT,
        "GPUCLOUD_CLUSTER_NAME": "local-1",
        "GPUCLOUD_CLUSTER_REGION": "local-1",
        "GPUCLOUD_CLUSTER_ZONES": '["zone-a", "zone-b"]',
        # The tests stop the second cluster's API server for a while: lost after 10 s.
        "GPUCLOUD_CLUSTER_LOST_GRACE_S": "10",
    },
}


def _local_settings(name: str) -> dict[str, str]:
    settings = dict(_SERVICE_SETTINGS.get(name, {}))
    if name == "gateway":
        # The console `up` built (provision.console_build), over plain http, whose
        # pages upload straight to the object store.
        settings["GPUCLOUD_CONSOLE_DIR"] = str(provision.console_directory())
        settings["GPUCLOUD_CONSOLE_COOKIE_SECURE"] = "false"
        settings["GPUCLOUD_SERVED_OVER_TLS"] = "false"
        settings["GPUCLOUD_PUBLIC_URL"] = f"http://127.0.0.1:{layout.PORTS.gateway}"
        settings["GPUCLOUD_CONSOLE_CONNECT_SOURCES"] = json.dumps([s3_endpoint()])
    return settings


def _venv_python() -> str:
    venv = layout.REPO_ROOT / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def running_env(ctx: Context, name: str) -> dict[str, str]:
    """Everything service `name` runs with here but its address: what `stack env
    --service` prints, so a second copy (a test's, a benchmark's) runs as this one."""
    return {**principal_env(ctx, name), **_local_settings(name)}


def _service(name: str) -> Component:
    port = service_port(name)
    return Component(
        name=name,
        kind="service",
        argv=lambda _ctx: [_venv_python(), "-m", f"gpucloud_{name}"],
        env=lambda ctx: {
            **running_env(ctx, name),
            "GPUCLOUD_HTTP_HOST": HOST,
            "GPUCLOUD_HTTP_PORT": str(port),
        },
        healthy=lambda _ctx: probes.http_ok(f"http://{HOST}:{port}/readyz", timeout=5.0),
        ports=(port,),
    )


def infra() -> tuple[Component, ...]:
    """The servers `up` starts: the object store is MinIO or Ceph (layout.object_store())."""
    return (
        ETCD, KUBE_APISERVER, KUBE_CONTROLLER_MANAGER, KUBE_SCHEDULER, KWOK, *SECOND_CLUSTER,
        KAFKA, POSTGRES, FERRETDB, *object_store(),
    )  # fmt: skip


def _gpu_simulator(cluster: LocalCluster) -> Component:
    """Telemetry for a cluster's kwok fleet: the node agent in simulation mode, with
    its fault-injection API (docs/monitoring.md), reporting the cluster it is in."""

    def env(ctx: Context) -> dict[str, str]:
        own = principal_env(ctx, "agent") | {"GPUCLOUD_CLUSTER_NAME": cluster.name}
        if cluster is not LOCAL_1:
            path = layout.etc_dir() / f"kubeconfig-agent{cluster.suffix}"
            kube_access.write_kubeconfig(
                path, kube_access.user("agent"), ctx.secrets.kube_tokens["agent"],
                ctx.pki / "ca.crt", server=cluster.server,
            )  # fmt: skip
            own["GPUCLOUD_KUBECONFIG"] = str(path)
        return own

    return Component(
        name=f"gpu-simulator{cluster.suffix}",
        kind="service",
        argv=lambda _ctx: [
            *(_venv_python(), "-m", "gpucloud_agent", "--simulate"),
            *("--selector", "gpucloud.io/node-pool"),
            *("--control-port", str(cluster.simulator_port)),
            # A page at each instance pod's loopback address and ports: what "Open"
            # shows here, where kwok runs no container (gpucloud_agent/standin.py).
            "--standins",
        ],
        env=env,
        healthy=lambda _ctx: probes.http_ok(f"http://{HOST}:{cluster.simulator_port}/healthz"),
        ports=(cluster.simulator_port,),
    )


GPU_SIMULATOR = _gpu_simulator(LOCAL_1)
#: The second cluster's fleet's telemetry and stand-ins.
GPU_SIMULATOR_LOCAL_2 = _gpu_simulator(LOCAL_2)
SERVICES: tuple[Component, ...] = (
    *(_service(name) for name in SERVICE_NAMES),
    GPU_SIMULATOR,
    GPU_SIMULATOR_LOCAL_2,
)
#: What runs on the cluster's control plane once it is up: started after `infra()`.
ADDONS: tuple[Component, ...] = (JOBSET,)
#: Every component either object store may run: `down`, `logs` and `reset` reach them all.
ALL: tuple[Component, ...] = (
    ETCD, KUBE_APISERVER, KUBE_CONTROLLER_MANAGER, KUBE_SCHEDULER, KWOK, *SECOND_CLUSTER, KAFKA,
    POSTGRES, FERRETDB, MINIO, *CEPH, *ADDONS, *SERVICES,
)  # fmt: skip
BY_NAME = {component.name: component for component in ALL}
