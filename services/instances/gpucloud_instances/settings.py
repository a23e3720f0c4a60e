from __future__ import annotations

import os
import socket

from pydantic import Field

from gpucloud_libs.settings import ServiceSettings


class InstancesSettings(ServiceSettings):
    service_name: str = "instances"
    http_port: int = 8001
    #: Path to a kubeconfig; unset means in-cluster configuration.
    kubeconfig: str | None = None
    #: Where the controller's lease and the warm-stock placeholders live.
    system_namespace: str = "gpucloud-system"
    stock_namespace: str = "gpucloud-stocks"
    #: The namespace allowed to reach tenant pods (the default-deny NetworkPolicy):
    #: the gateway serves instance URLs.
    gateway_namespace: str = "gpucloud-system"
    #: Instance URLs are <instance>-<port>-<tenant>.<instance_domain>; the wildcard
    #: DNS name points at the gateway (the gateway's setting must match).
    instance_domain: str = "instances.gpucloud.local"
    #: A pending instance that fits the fleet but finds no free GPUs fails after this.
    schedule_timeout_s: float = 300.0
    #: A node NotReady for longer than this counts as lost, failing its instances
    #: (a deleted node is lost at once). Shorter blips are ridden out.
    node_lost_grace_s: float = 120.0
    #: The storage service, which makes what an instance's storages need.
    storage_url: str = "http://127.0.0.1:8002"
    #: Full resync of every live instance against Kubernetes.
    resync_interval_s: float = 15.0
    lease_duration_s: int = 15
    #: This replica's identity in the controller lease.
    replica_id: str = Field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    #: Reconciles mostly wait on the API server and the database, so many run at once.
    reconcile_workers: int = 32
    #: Namespace quota for CPU and memory when a tenant's quota does not say.
    default_cpu_cores_per_gpu: int = 32
    default_memory_gib_per_gpu: int = 256
