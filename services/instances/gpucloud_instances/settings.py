from __future__ import annotations

import os
import socket

from pydantic import Field, IPvAnyNetwork, SecretStr

from gpucloud_libs.naming import TENANT_KUBECTL_ROLE, TENANT_STORAGE_ROLE
from gpucloud_libs.settings import ServiceSettings

DENIED_BY_DEFAULT = (
    "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
    "172.16.0.0/12", "192.0.0.0/24", "192.168.0.0/16", "198.18.0.0/15", "224.0.0.0/3",
    "::1/128", "fc00::/7", "fe80::/10", "ff00::/8",
    # Prefixes that embed an IPv4 address (NAT64, local-use NAT64, 6to4, IPv4-compatible):
    # through a translator they reach the private ranges above (review M9).
    "64:ff9b::/96", "64:ff9b:1::/48", "2002::/16", "::/96",
)  # fmt: skip


class InstancesSettings(ServiceSettings):
    service_name: str = "instances"
    http_port: int = 8001
    #: Registries tenants' images may come from (hosts as in the image reference,
    #: `docker.io` for Docker Hub's short names). Empty: any registry named by a public
    #: DNS name; an address or a local name is refused either way (review M10).
    #: A JSON list in the environment: GPUCLOUD_ALLOWED_REGISTRIES='["nvcr.io"]'.
    allowed_registries: tuple[str, ...] = ()
    #: Path to a kubeconfig; unset means in-cluster configuration.
    kubeconfig: str | None = None
    #: The cluster that kubeconfig reaches (the home cluster, clusters/): its name,
    #: region and zones (none: the zones its nodes are labelled with).
    cluster_name: str = Field(default="home", pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
    cluster_region: str = Field(default="default", pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
    cluster_zones: tuple[str, ...] = ()
    #: Where the warm-stock placeholders and the controller's lease live: a namespace
    #: of the service's own that holds no Secret, never the platform's, whose Secrets
    #: the service must not be able to reach (docs/security.md, C1).
    stock_namespace: str = "gpucloud-stocks"
    lease_namespace: str = "gpucloud-stocks"
    #: Who may manage claims and Secrets in tenant namespaces, and only there: the
    #: storage service's Kubernetes identity, `User:<name>` or
    #: `ServiceAccount:<namespace>:<name>`. Each tenant namespace gets a RoleBinding
    #: for it (docs/security.md). Unset: the storage service's rights are the cluster's.
    tenant_storage_subject: str | None = Field(
        default=None, pattern=r"^(User:[^:]+|ServiceAccount:[^:]+:[^:]+)$"
    )
    #: The ClusterRole that RoleBinding grants: the chart names it after its release.
    tenant_storage_role: str = TENANT_STORAGE_ROLE
    #: The ClusterRole a user's `gpucloud kubeconfig` credential holds in their
    #: tenant's namespace (its account's RoleBinding there).
    tenant_kubectl_role: str = TENANT_KUBECTL_ROLE
    #: The API server address those credentials name; unset: the kubeconfig's own
    #: (in a cluster, none: no kubeconfig is issued).
    user_kube_server: str | None = None
    #: The namespace allowed to reach tenant pods (the default-deny NetworkPolicy):
    #: the gateway serves instance URLs.
    gateway_namespace: str = "gpucloud-system"
    #: Where the cluster DNS runs (pods labelled k8s-app=kube-dns): the one cluster
    #: destination a tenant pod may reach.
    dns_namespace: str = "kube-system"
    #: Addresses a tenant pod may never reach besides the built-in private,
    #: loopback, link-local (cloud metadata), shared (CGNAT) and reserved ranges:
    #: the cluster's pod, service and node ranges where they are public addresses
    #: (GPUCLOUD_TENANT_EGRESS_EXTRA_DENIED_CIDRS, a JSON list).
    tenant_egress_extra_denied_cidrs: list[IPvAnyNetwork] = Field(default_factory=list)
    #: Instance URLs are <instance>-<port>-<tenant>.<instance_domain>; the wildcard
    #: DNS name points at the gateway (the gateway's setting must match).
    instance_domain: str = "instances.gpucloud.local"
    #: How instance and service URLs are written; must match the gateway's settings.
    instance_url_scheme: str = "https"
    #: The port in those URLs; unset, the scheme's own.
    instance_url_port: int | None = None
    #: A pending instance that fits the fleet but finds no free GPUs fails after this.
    schedule_timeout_s: float = 300.0
    #: A node NotReady for longer than this counts as lost, failing its instances
    #: (a deleted node is lost at once). Shorter blips are ridden out.
    node_lost_grace_s: float = 120.0
    #: A registered cluster that has not answered for longer than this is lost: its
    #: workloads fail (`cluster_lost`), billed up to its first silent look (decision 130).
    cluster_lost_grace_s: float = 120.0
    #: The storage service, which makes what an instance's storages need.
    storage_url: str = "http://127.0.0.1:8002"
    #: Full resync of every live instance against Kubernetes.
    resync_interval_s: float = 15.0
    lease_duration_s: int = 15
    #: Logs a tenant may follow at once from one replica (review H4), and how long one
    #: follow may stay open; reads and follows use a Kubernetes client of their own.
    log_follows_per_tenant: int = Field(default=4, ge=1, le=100)
    log_follow_max_s: float = Field(default=3600.0, gt=0)
    #: Reads without follow a tenant may have at once from one replica, and each
    #: one's bounds: the first this many bytes of what it asks for, within this time
    #: (review N8). Follows and reads each have a Kubernetes client of their own.
    log_reads_per_tenant: int = Field(default=8, ge=1, le=100)
    log_read_max_bytes: int = Field(default=4 * 2**20, ge=1024)
    log_read_max_s: float = Field(default=30.0, gt=0)
    #: This replica's identity in the controller lease.
    replica_id: str = Field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    #: Serve instance lists and the API's reads of an instance from the workload
    #: cache, kept by this process's own writes (workloads/cache.py). Right only
    #: where one replica runs, since each replica sees only its own writes: the Helm
    #: chart turns it off when it runs more than one.
    lists_from_memory: bool = True
    #: Reconciles mostly wait on the API server and the database, so many run at once.
    reconcile_workers: int = 32
    #: Fernet key that seals tenants' registry passwords at rest (registry/credentials.py).
    registry_secrets_key: SecretStr = SecretStr("")
    #: Fernet key that seals registered clusters' kubeconfigs at rest (clusters/).
    cluster_secrets_key: SecretStr = SecretStr("")
    #: Namespace quota for CPU and memory when a tenant's quota does not say.
    default_cpu_cores_per_gpu: int = 32
    default_memory_gib_per_gpu: int = 256

    @property
    def tenant_egress_denied_cidrs(self) -> list[str]:
        extra = [str(network) for network in self.tenant_egress_extra_denied_cidrs]
        return [*DENIED_BY_DEFAULT, *extra]

    def dialed_endpoints(self) -> dict[str, str]:
        return {**super().dialed_endpoints(), "storage_url": self.storage_url}
