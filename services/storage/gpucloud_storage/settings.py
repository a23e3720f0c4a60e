from __future__ import annotations

from typing import Literal

from pydantic import SecretStr

from gpucloud_libs.settings import ServiceSettings


class StorageSettings(ServiceSettings):
    service_name: str = "storage"
    http_port: int = 8002
    #: Which store serves object storages: both speak S3; their admin APIs differ.
    object_store: Literal["minio", "rgw"] = "minio"
    #: Where this service reaches the object store (admin and S3 calls).
    s3_endpoint: str = "http://127.0.0.1:9000"
    #: Where clients and instances reach it: presigned URLs and accessors name this.
    s3_public_endpoint: str | None = None
    s3_access_key: str = ""
    s3_secret_key: SecretStr = SecretStr("")
    s3_region: str = "us-east-1"
    #: Seals each storage's presigning key at rest (presigners.py).
    storage_secrets_key: SecretStr = SecretStr("")
    #: Path to a kubeconfig; unset means in-cluster configuration.
    kubeconfig: str | None = None
    #: Storage class of a volume storage that does not name one.
    default_storage_class: str = "gpucloud-standard"
    #: Other storage classes a tenant may name (review L5): a class decides where the
    #: bytes live and who else shares the disks, so it is the operator's to offer.
    #: A JSON list in the environment: GPUCLOUD_STORAGE_CLASSES='["fast-nvme"]'.
    storage_classes: tuple[str, ...] = ()
    #: How often bytes stored are sampled and published for metering.
    usage_interval_s: float = 60.0
    #: How often storages left half-created or half-deleted (a crash) are finished.
    sweep_interval_s: float = 15.0
    #: Smallest part of a multipart upload (S3's floor is 5 MiB; larger parts mean
    #: fewer requests for a 10 GB model).
    multipart_part_bytes: int = 64 * 1024 * 1024

    def dialed_endpoints(self) -> dict[str, str]:
        endpoints = {**super().dialed_endpoints(), "s3_endpoint": self.s3_endpoint}
        if self.s3_public_endpoint:
            endpoints["s3_public_endpoint"] = self.s3_public_endpoint
        return endpoints
