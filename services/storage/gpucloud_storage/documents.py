"""The storage service's stored documents, typed at the store boundary.

A misspelt field is a type error rather than a KeyError at run time. Fields
only one kind of storage has, or that a step adds later, are NotRequired and
read with `.get`.
"""

from __future__ import annotations

from datetime import datetime
from typing import NotRequired, TypedDict

from gpucloud_libs.naming import DEFAULT_PROJECT, project_namespace


class TenantDoc(TypedDict):
    _id: str
    status: str
    max_storage_bytes: int
    #: The tenant's projects but `default`, each with its `members` (user ids): who
    #: sees a project's storages (decision 140).
    projects: NotRequired[dict[str, dict[str, list[str]]]]


def volume_namespace(doc: StorageDoc) -> str:
    """Where a volume's claim lives: its project's namespace (the tenant's own, for
    `default`), as made; a deleted project's volume keeps it until deleted."""
    return project_namespace(doc["tenant_id"], doc.get("project") or DEFAULT_PROJECT)


class PresignerDoc(TypedDict):
    access_key: str
    secret: str  # sealed


class StorageDoc(TypedDict):
    _id: str  # <tenant>/<storage>
    tenant_id: str
    storage_id: str
    name: str | None
    kind: str  # object | volume
    state: str  # provisioning | ready | deleting
    message: str | None
    size_bytes: int
    created_by: str
    created_at: datetime
    updated_at: datetime
    #: The project it belongs to (decision 140); absent: `default`, as before projects.
    project: NotRequired[str]
    bucket: NotRequired[str]  # object storages
    storage_class: NotRequired[str]  # volume storages
    access_mode: NotRequired[str]  # volume storages
    #: Set when a deletion starts: empty the bucket first.
    force: NotRequired[bool]
    #: Resizes in flight, by request: each holds its bytes against the tenant's quota
    #: until it is applied or refused (storages.py).
    reservations: NotRequired[dict[str, int]]
    #: The object storage's presigning key pair, its secret sealed (presigners.py).
    presigner: NotRequired[PresignerDoc | None]


class AccessorDoc(TypedDict):
    _id: str  # the access key id
    tenant_id: str
    storage_id: str
    name: str | None
    mode: str  # read-only | read-write
    expires_at: datetime | None
    #: Set for an instance's own accessor, revoked when the instance ends.
    instance_id: str | None
    created_by: str
    created_at: datetime


class UploadDoc(TypedDict):
    _id: str  # the multipart upload id
    tenant_id: str
    storage_id: str
    key: str
    created_at: datetime


class AttachedItem(TypedDict):
    storage_id: str
    kind: str
    read_only: bool


class AttachmentDoc(TypedDict):
    _id: str  # <tenant>/<instance>
    tenant_id: str
    instance_id: str
    storage_ids: list[str]
    items: list[AttachedItem]
    accessor_ids: list[str]
    created_at: datetime
    #: The instance's stay it was made for (AttachmentRequest.stay); 0 for jobs.
    stay: NotRequired[int]
    #: The registered cluster its Secrets were written in (None: this service's own).
    cluster: NotRequired[str | None]
    #: The project whose namespace its Secrets were written in (absent: `default`).
    project: NotRequired[str]
    #: Every grant made (credentials issued, Secrets written). A retry returns a
    #: complete attachment as it is and redoes one that is not: the service never
    #: reads a Secret back, so it may read none (review M3).
    complete: NotRequired[bool]
