"""Kubernetes objects the storage service owns, as plain JSON dicts (no I/O)."""

from __future__ import annotations

from typing import Any

from gpucloud_libs.naming import (
    INSTANCE_LABEL,
    MANAGED_LABEL,
    STORAGE_LABEL,
    TENANT_LABEL,
    storage_claim_name,
    storage_secret_name,
)

Manifest = dict[str, Any]


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
            "labels": {MANAGED_LABEL: "true", TENANT_LABEL: tenant_id, STORAGE_LABEL: storage_id},
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
                MANAGED_LABEL: "true",
                TENANT_LABEL: tenant_id,
                STORAGE_LABEL: storage_id,
                INSTANCE_LABEL: instance_id,
            },
        },
        "stringData": variables,
    }
