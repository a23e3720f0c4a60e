"""Request and response models of the storage API."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import AfterValidator, AwareDatetime, Field, SecretStr

from gpucloud_libs.http import ApiModel
from gpucloud_libs.naming import DEFAULT_PROJECT, PROJECT_ID_PATTERN

from .backend import AccessMode

StorageId = Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$")]
StorageKind = Literal["object", "volume"]
StorageState = Literal["provisioning", "ready", "deleting", "failed"]


def _fits_s3(key: str) -> str:
    if len(key.encode()) > 1024:
        raise ValueError("an object key is at most 1,024 bytes of UTF-8")
    return key


#: S3 keys: up to 1,024 bytes of UTF-8 (a character may take four); NUL is refused by
#: ApiModel.
ObjectKey = Annotated[str, Field(min_length=1, max_length=1024), AfterValidator(_fits_s3)]

MIB = 1024 * 1024
#: S3's ceiling for one object.
MAX_OBJECT_BYTES = 5 * 1024**4
MAX_STORAGE_BYTES = 2**50  # 1 PiB
#: Part URLs one answer carries at most; S3 allows 10,000 parts.
MAX_PART_URLS = 1000
#: Objects one batch of presigned URLs covers at most: a page of a listing.
MAX_BATCH_URLS = 1000


class StorageCreate(ApiModel):
    #: Client-chosen id, unique within the tenant; generated when absent.
    storage_id: StorageId | None = Field(default=None, alias="storageID")
    name: str | None = Field(default=None, max_length=128)
    kind: StorageKind
    #: The capacity: an object storage's hard quota, or a volume's size.
    size_bytes: int = Field(ge=MIB, le=MAX_STORAGE_BYTES)
    #: Volumes only; the operator's default class when unset.
    storage_class: str | None = Field(
        default=None, pattern=r"^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$"
    )
    #: Volumes only: ReadWriteMany lets instances on several nodes mount it, where
    #: the storage class supports it.
    access_mode: Literal["ReadWriteOnce", "ReadWriteMany"] = "ReadWriteOnce"
    #: The project it belongs to (decision 140): one the caller may act in; left out,
    #: `default`, or a project key's own. A volume's claim is made in its namespace.
    project: Annotated[str, Field(pattern=PROJECT_ID_PATTERN)] | None = None


class StorageUpdate(ApiModel):
    name: str | None = Field(default=None, max_length=128)
    #: A new quota (object) or a larger size (volume; volumes only grow).
    size_bytes: int | None = Field(default=None, ge=MIB, le=MAX_STORAGE_BYTES)


class Storage(ApiModel):
    storage_id: str = Field(alias="storageID")
    tenant_id: str = Field(alias="tenantID")
    name: str | None = None
    kind: StorageKind
    state: StorageState
    message: str | None = None
    size_bytes: int
    #: Bytes stored at the last sample (object storages); None before the first.
    used_bytes: int | None = None
    #: Object storages: the bucket and where to reach it with an accessor.
    bucket: str | None = None
    endpoint: str | None = None
    region: str | None = None
    #: Volume storages: the claim in the tenant's namespace, and its class.
    claim_name: str | None = None
    storage_class: str | None = None
    access_mode: str | None = None
    #: Instances (not stopped yet) this storage is attached to.
    attached_to: list[str] = Field(default_factory=list)
    created_at: datetime
    updated_at: datetime
    #: The project it belongs to: its members see and attach it (decision 140).
    project: str = DEFAULT_PROJECT


class StoragePage(ApiModel):
    items: list[Storage]
    next_cursor: str | None = None


class AccessorCreate(ApiModel):
    name: str | None = Field(default=None, max_length=128)
    mode: AccessMode = "read-only"
    #: When the object store stops honouring the key: 15 minutes to a year ahead.
    #: Unset: valid until deleted.
    expires_at: AwareDatetime | None = None


class Accessor(ApiModel):
    #: Also the S3 access key id.
    accessor_id: str = Field(alias="accessorID")
    storage_id: str = Field(alias="storageID")
    name: str | None = None
    mode: AccessMode
    expires_at: datetime | None = None
    #: Set when the accessor was made for an instance the storage is attached to.
    instance_id: str | None = Field(default=None, alias="instanceID")
    created_at: datetime


class AccessorCreated(Accessor):
    """Returned once, by the create call: the secret is not stored and cannot be shown again."""

    secret_access_key: str
    endpoint: str
    region: str
    bucket: str


class AccessorPage(ApiModel):
    items: list[Accessor]


class BatchObject(ApiModel):
    key: ObjectKey
    size_bytes: int = Field(ge=0, le=MAX_OBJECT_BYTES)


class UploadUrlsRequest(ApiModel):
    """Single-PUT URLs for many small objects in one call: how a directory of small files
    goes up without one API call per file. Each object must fit in one part."""

    objects: list[BatchObject] = Field(min_length=1, max_length=MAX_BATCH_URLS)
    expires_in_s: int = Field(default=3600, ge=60, le=7 * 24 * 3600)


class DownloadUrlsRequest(ApiModel):
    keys: list[ObjectKey] = Field(min_length=1, max_length=MAX_BATCH_URLS)
    expires_in_s: int = Field(default=3600, ge=1, le=7 * 24 * 3600)


class ObjectUrl(ApiModel):
    key: str
    url: str


class ObjectUrls(ApiModel):
    method: Literal["GET", "PUT"]
    expires_at: datetime
    urls: list[ObjectUrl]


class DownloadRequest(ApiModel):
    key: ObjectKey
    expires_in_s: int = Field(default=3600, ge=1, le=7 * 24 * 3600)


class PresignedUrl(ApiModel):
    method: Literal["GET", "PUT"]
    url: str
    expires_at: datetime


class UploadRequest(ApiModel):
    key: ObjectKey
    #: The object's size. Above one part it becomes a multipart upload; unknown
    #: (unset) means a single PUT, up to 5 GiB.
    size_bytes: int | None = Field(default=None, ge=0, le=MAX_OBJECT_BYTES)
    expires_in_s: int = Field(default=3600, ge=60, le=7 * 24 * 3600)


class PartUrl(ApiModel):
    part_number: int
    url: str


class UploadPlan(ApiModel):
    """How to upload: PUT the whole object to `url`, or each part to its URL, then complete."""

    key: str
    expires_at: datetime
    #: Single PUT.
    url: str | None = None
    #: Multipart: PUT byte range [(n-1)*partSizeBytes, n*partSizeBytes) to part n,
    #: keep each response's ETag, then POST them to the upload's `complete`.
    upload_id: str | None = Field(default=None, alias="uploadID")
    part_size_bytes: int | None = None
    parts: list[PartUrl] = Field(default_factory=list)


class PartUrlsRequest(ApiModel):
    """Fresh URLs for some parts of an upload already planned: how a client resumes."""

    part_numbers: list[Annotated[int, Field(ge=1, le=10_000)]] = Field(
        min_length=1, max_length=MAX_PART_URLS
    )
    expires_in_s: int = Field(default=3600, ge=60, le=7 * 24 * 3600)


class PartUrls(ApiModel):
    key: str
    upload_id: str = Field(alias="uploadID")
    expires_at: datetime
    parts: list[PartUrl]


class CompletedPart(ApiModel):
    part_number: int = Field(ge=1, le=10_000)
    etag: str = Field(min_length=1, max_length=128)


class UploadComplete(ApiModel):
    parts: list[CompletedPart] = Field(min_length=1, max_length=10_000)


class ObjectEntry(ApiModel):
    key: str
    size_bytes: int
    etag: str
    last_modified: datetime | None = None


class ObjectListing(ApiModel):
    objects: list[ObjectEntry]
    #: "Folders" under the prefix, when listing with a delimiter.
    prefixes: list[str] = Field(default_factory=list)
    next_cursor: str | None = None


class AttachmentItem(ApiModel):
    storage_id: StorageId = Field(alias="storageID")
    read_only: bool = False


class AttachmentRequest(ApiModel):
    """From the instances service: the storages an instance uses."""

    storages: list[AttachmentItem] = Field(min_length=1, max_length=16)
    #: An instance's stay on a node (the sequence of its latest `pending`): a start again
    #: is a new stay, whose attachment the end of the last one does not release.
    stay: int = Field(default=0, ge=0)
    #: The registered cluster its pods run in (clusters.py); None: the storage
    #: service's own. Its object storages' Secrets are written there; a volume
    #: cannot be attached there.
    cluster: str | None = Field(default=None, max_length=63)
    #: The tenant's project it runs in (decision 138): its Secrets go in the
    #: project's namespace, and a project's work takes no volume (its claim lives in
    #: the tenant's namespace).
    project: str = Field(default=DEFAULT_PROJECT, pattern=PROJECT_ID_PATTERN)


class StorageClusterRegistration(ApiModel):
    """The storage service's own kubeconfig for a cluster registered with the
    instances service (its name), as the operator gives it: sealed, never returned."""

    kubeconfig: SecretStr = Field(min_length=1, max_length=256 * 1024)


class StorageCluster(ApiModel):
    """A cluster the storage service writes instances' credentials in."""

    name: str
    #: The API server its kubeconfig reaches.
    server: str
    registered_at: datetime


class AttachedStorage(ApiModel):
    storage_id: str = Field(alias="storageID")
    kind: StorageKind
    #: Volumes: mount this claim.
    claim_name: str | None = None
    #: Object storages: load this Secret's keys as environment variables.
    secret_name: str | None = None
    env_prefix: str | None = None


class AttachmentPlan(ApiModel):
    instance_id: str = Field(alias="instanceID")
    storages: list[AttachedStorage]
