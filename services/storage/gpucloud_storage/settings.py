from __future__ import annotations

from pydantic import SecretStr

from gpucloud_libs.settings import ServiceSettings


class StorageSettings(ServiceSettings):
    service_name: str = "storage"
    http_port: int = 8002
    s3_endpoint: str = "http://127.0.0.1:9000"
    s3_access_key: str = ""
    s3_secret_key: SecretStr = SecretStr("")
    s3_region: str = "us-east-1"
