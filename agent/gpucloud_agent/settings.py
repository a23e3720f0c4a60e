"""The node agent's settings (GPUCLOUD_* environment variables)."""

from __future__ import annotations

from pydantic import SecretStr

from gpucloud_libs.settings import ServiceSettings


class AgentSettings(ServiceSettings):
    service_name: str = "agent"
    kubeconfig: str | None = None
    #: The cluster this agent's nodes are in (the platform's name for it), reported
    #: with each node's inventory; unset: the platform's home cluster.
    cluster_name: str | None = None
    telemetry_interval_s: float = 1.0
    #: The simulator's fault API takes this bearer token (required with --control-port).
    simulator_token: SecretStr = SecretStr("")
    #: Where a real node's agent asks for its node's key (seals.py): the monitoring
    #: service's own address, not the gateway's.
    monitoring_url: str = ""
    #: The simulator's: derives each simulated node's key (monitoring's own secret).
    telemetry_secret: SecretStr = SecretStr("")
