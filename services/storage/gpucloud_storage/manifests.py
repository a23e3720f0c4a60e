"""Kubernetes objects the storage service owns, as plain JSON dicts (no I/O)."""

from __future__ import annotations

from typing import Any

from gpucloud_libs.naming import storage_claim_name, storage_secret_name

Manifest = dict[str, Any]

MANAGED = "gpucloud.io/managed"
TENANT = "gpucloud.io/tenant"
STORAGE = "gpucloud.io/storage"
INSTANCE = "gpucloud.io/instance"


def volume_claim(
    namespace: str,
    tenant_id: str,
    storage_id: str,
    *,
    size_bytes: int,
    storage_class: str,
    access_mode: str,
) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": storage_claim_name(storage_id),
            "namespace": namespace,
            "labels": {MANAGED: "true", TENANT: tenant_id, STORAGE: storage_id},
        },
        "spec": {
            "accessModes": [access_mode],
            "storageClassName": storage_class,
            "resources": {"requests": {"storage": str(size_bytes)}},
        },
    }


def credentials_secret(
    namespace: str,
    tenant_id: str,
    storage_id: str,
    instance_id: str,
    variables: dict[str, str],
) -> Manifest:
    """The variables an instance gets for one object storage (S3 SDKs read AWS_*)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": storage_secret_name(storage_id, instance_id),
            "namespace": namespace,
            "labels": {
                MANAGED: "true",
                TENANT: tenant_id,
                STORAGE: storage_id,
                INSTANCE: instance_id,
            },
        },
        "stringData": variables,
    }
