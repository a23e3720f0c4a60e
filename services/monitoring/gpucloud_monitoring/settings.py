from __future__ import annotations

from gpucloud_libs.settings import ServiceSettings


class MonitoringSettings(ServiceSettings):
    service_name: str = "monitoring"
    http_port: int = 8004
