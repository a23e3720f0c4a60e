from __future__ import annotations

from pydantic import Field, SecretStr

from gpucloud_libs.settings import ServiceSettings


class MonitoringSettings(ServiceSettings):
    service_name: str = "monitoring"
    http_port: int = 8004
    #: Path to a kubeconfig (node zones and GPU types); unset means in-cluster.
    kubeconfig: str | None = None
    #: Roll-ups kept: 1-minute windows for this many hours, 1-hour ones for days.
    minute_retention_h: int = 48
    hour_retention_days: int = 90
    #: Webhooks may target private and loopback addresses (a lab or a local
    #: stack); off in production, where a rule's URL must not reach inside.
    webhook_allow_private_networks: bool = False
    #: DNS servers for webhook hosts (`ip` or `ip:port`); unset: the system's resolver.
    webhook_nameservers: list[str] = Field(default_factory=list)
    #: Fernet key that seals webhook signing secrets at rest (webhook_secrets.py).
    webhook_secrets_key: SecretStr = SecretStr("")
    #: Take telemetry only from nodes the cluster has (known_nodes.py). Off only for
    #: the ingest benchmark, whose thousand simulated nodes exist nowhere else.
    known_nodes_only: bool = True
    #: Derives each node's key for sealing its telemetry (node_keys.py); only this
    #: service holds it (and, on the local stack, the GPU simulator that stands in for
    #: every simulated node's agent).
    telemetry_secret: SecretStr = SecretStr("")
    #: The node agents' ServiceAccounts, `system:serviceaccount:<namespace>:<name>`:
    #: a token of one of them bound to a pod on a node gets that node's key.
    agent_service_accounts: list[str] = Field(default_factory=list)
    #: Alert rules a tenant may hold: each one is evaluated on every sample of its GPUs.
    max_rules_per_tenant: int = 100
