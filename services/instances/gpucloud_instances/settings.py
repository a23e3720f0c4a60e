from __future__ import annotations

from gpucloud_libs.settings import ServiceSettings


class InstancesSettings(ServiceSettings):
    service_name: str = "instances"
    http_port: int = 8001
    #: Path to a kubeconfig; unset means in-cluster configuration.
    kubeconfig: str | None = None
