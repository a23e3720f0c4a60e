from __future__ import annotations

from gpucloud_libs.settings import ServiceSettings


class MeteringSettings(ServiceSettings):
    service_name: str = "metering"
    http_port: int = 8003
