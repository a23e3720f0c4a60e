"""HTTP routes of the storage service. Callers come through the gateway, which
signs their identity; every route scopes its reads and writes by that identity.
The attachment route is for the instances service only and is not forwarded."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Response, status
from fastapi.responses import JSONResponse

from gpucloud_libs.http import CurrentIdentity, app_part, identity_from
from gpucloud_libs.identity import GATEWAY, Identity, Role

from .accessors import Accessors
from .attachments import INSTANCES_SIGNER, Attachments
from .clusters import StorageClusters
from .schemas import (
    AccessorCreate,
    AccessorCreated,
    AccessorPage,
    AttachmentPlan,
    AttachmentRequest,
    DownloadRequest,
    DownloadUrlsRequest,
    ObjectEntry,
    ObjectListing,
    ObjectUrls,
    PartUrls,
    PartUrlsRequest,
    PresignedUrl,
    Storage,
    StorageCluster,
    StorageClusterRegistration,
    StorageCreate,
    StoragePage,
    StorageUpdate,
    UploadComplete,
    UploadPlan,
    UploadRequest,
    UploadUrlsRequest,
)
from .storages import Storages
from .transfers import Transfers

#: The two routes the instances service calls, signing as the tenant it acts for.
GatewayOrInstances = Annotated[Identity, Depends(identity_from(GATEWAY, INSTANCES_SIGNER))]

router = APIRouter()
MEMBERS: tuple[Role, ...] = ("tenant-admin", "tenant-user")


StoragesPart = Annotated[Storages, app_part(Storages)]
#: A cluster's name, as registered with the instances service: a DNS label.
ClusterName = Annotated[str, Path(pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", max_length=63)]
ClustersPart = Annotated[StorageClusters, app_part(StorageClusters)]
AccessorsPart = Annotated[Accessors, app_part(Accessors)]
TransfersPart = Annotated[Transfers, app_part(Transfers)]
AttachmentsPart = Annotated[Attachments, app_part(Attachments)]


@router.post(
    "/storages",
    status_code=status.HTTP_201_CREATED,
    tags=["storages"],
    summary="Create an object storage (bucket with a quota) or a volume storage (PVC)",
)
async def create_storage(
    body: StorageCreate, identity: CurrentIdentity, storages: StoragesPart
) -> Storage:
    identity.require_role(*MEMBERS)
    return await storages.create(identity, body)


@router.get("/storages", tags=["storages"], summary="List the tenant's storages")
async def list_storages(
    identity: CurrentIdentity,
    storages: StoragesPart,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> StoragePage:
    return await storages.page(identity, cursor, limit)


@router.get("/storages/{storage_id}", tags=["storages"], summary="One storage")
async def get_storage(
    storage_id: str, identity: GatewayOrInstances, storages: StoragesPart
) -> Storage:
    """Also the instances service's check, as the tenant, of the storages a start names."""
    return await storages.get(identity, storage_id)


@router.patch(
    "/storages/{storage_id}",
    tags=["storages"],
    summary="Rename, change an object storage's quota, or grow a volume",
)
async def update_storage(
    storage_id: str, body: StorageUpdate, identity: CurrentIdentity, storages: StoragesPart
) -> Storage:
    identity.require_role(*MEMBERS)
    return await storages.update(identity, storage_id, body)


@router.delete(
    "/storages/{storage_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    tags=["storages"],
    summary="Delete a storage; a bucket holding objects needs force=true",
    responses={
        202: {"model": Storage, "description": "Deletion continues in the background"},
        409: {"description": "Attached to an instance, or not empty without force"},
    },
)
async def delete_storage(
    storage_id: str,
    identity: CurrentIdentity,
    storages: StoragesPart,
    force: bool = False,
) -> Response:
    identity.require_role(*MEMBERS)
    pending = await storages.delete(identity, storage_id, force=force)
    if pending is None:
        return Response(status_code=status.HTTP_204_NO_CONTENT)
    return JSONResponse(
        pending.model_dump(mode="json", by_alias=True), status_code=status.HTTP_202_ACCEPTED
    )


@router.post(
    "/storages/{storage_id}/accessors",
    status_code=status.HTTP_201_CREATED,
    tags=["accessors"],
    summary="Create S3 credentials for one storage; the secret is shown only here",
)
async def create_accessor(
    storage_id: str, body: AccessorCreate, identity: CurrentIdentity, accessors: AccessorsPart
) -> AccessorCreated:
    identity.require_role(*MEMBERS)
    return await accessors.create(identity, storage_id, body)


@router.get("/storages/{storage_id}/accessors", tags=["accessors"], summary="A storage's accessors")
async def list_accessors(
    storage_id: str, identity: CurrentIdentity, accessors: AccessorsPart
) -> AccessorPage:
    return AccessorPage(items=await accessors.list(identity, storage_id))


@router.delete(
    "/storages/{storage_id}/accessors/{accessor_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    tags=["accessors"],
    summary="Revoke an accessor at once",
)
async def delete_accessor(
    storage_id: str, accessor_id: str, identity: CurrentIdentity, accessors: AccessorsPart
) -> Response:
    identity.require_role(*MEMBERS)
    await accessors.delete(identity, storage_id, accessor_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get(
    "/storages/{storage_id}/objects",
    tags=["objects"],
    summary="List objects by prefix, a page at a time",
)
async def list_objects(
    storage_id: str,
    identity: CurrentIdentity,
    transfers: TransfersPart,
    prefix: Annotated[str, Query(max_length=1024)] = "",
    delimiter: Annotated[str, Query(max_length=1)] = "",
    cursor: Annotated[str | None, Query(max_length=4200)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 1000,
) -> ObjectListing:
    return await transfers.list_objects(
        identity, storage_id, prefix=prefix, delimiter=delimiter, cursor=cursor, limit=limit
    )


@router.post(
    "/storages/{storage_id}/revoke-urls",
    status_code=status.HTTP_204_NO_CONTENT,
    tags=["objects"],
    summary="Void every presigned URL of the storage made so far",
)
async def revoke_urls(
    storage_id: str, identity: CurrentIdentity, transfers: TransfersPart
) -> Response:
    identity.require_role(*MEMBERS)
    await transfers.revoke_urls(identity, storage_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post(
    "/storages/{storage_id}/downloads",
    tags=["objects"],
    summary="A presigned GET URL for one object",
)
async def presign_download(
    storage_id: str, body: DownloadRequest, identity: CurrentIdentity, transfers: TransfersPart
) -> PresignedUrl:
    return await transfers.presign_download(identity, storage_id, body)


@router.post(
    "/storages/{storage_id}/download-urls",
    tags=["objects"],
    summary="Presigned GET URLs for up to 1,000 objects at once",
)
async def presign_downloads(
    storage_id: str, body: DownloadUrlsRequest, identity: CurrentIdentity, transfers: TransfersPart
) -> ObjectUrls:
    return await transfers.presign_downloads(identity, storage_id, body)


@router.post(
    "/storages/{storage_id}/upload-urls",
    tags=["objects"],
    summary="Presigned PUT URLs for up to 1,000 small objects at once (each within one part)",
)
async def presign_uploads(
    storage_id: str, body: UploadUrlsRequest, identity: CurrentIdentity, transfers: TransfersPart
) -> ObjectUrls:
    identity.require_role(*MEMBERS)
    return await transfers.presign_uploads(identity, storage_id, body)


@router.post(
    "/storages/{storage_id}/uploads",
    tags=["objects"],
    summary="Presigned PUT URL(s) for one object; multipart above one part's size",
)
async def plan_upload(
    storage_id: str, body: UploadRequest, identity: CurrentIdentity, transfers: TransfersPart
) -> UploadPlan:
    identity.require_role(*MEMBERS)
    return await transfers.plan_upload(identity, storage_id, body)


@router.post(
    "/storages/{storage_id}/uploads/{upload_id}/parts",
    tags=["objects"],
    summary="Fresh presigned URLs for parts of a multipart upload: how an upload resumes",
)
async def presign_parts(
    storage_id: str,
    upload_id: str,
    body: PartUrlsRequest,
    identity: CurrentIdentity,
    transfers: TransfersPart,
) -> PartUrls:
    identity.require_role(*MEMBERS)
    return await transfers.presign_parts(identity, storage_id, upload_id, body)


@router.post(
    "/storages/{storage_id}/uploads/{upload_id}/complete",
    tags=["objects"],
    summary="Assemble a multipart upload from its parts' ETags",
)
async def complete_upload(
    storage_id: str,
    upload_id: str,
    body: UploadComplete,
    identity: CurrentIdentity,
    transfers: TransfersPart,
) -> ObjectEntry:
    identity.require_role(*MEMBERS)
    return await transfers.complete_upload(identity, storage_id, upload_id, body)


@router.delete(
    "/storages/{storage_id}/uploads/{upload_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    tags=["objects"],
    summary="Abort a multipart upload and drop its parts",
)
async def abort_upload(
    storage_id: str, upload_id: str, identity: CurrentIdentity, transfers: TransfersPart
) -> Response:
    identity.require_role(*MEMBERS)
    await transfers.abort_upload(identity, storage_id, upload_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.put(
    "/attachments/{instance_id}",
    tags=["internal"],
    summary="What an instance mounts and loads (instances service only)",
)
async def attach(
    instance_id: str,
    body: AttachmentRequest,
    identity: GatewayOrInstances,
    attachments: AttachmentsPart,
) -> AttachmentPlan:
    return await attachments.attach(identity, instance_id, body)


@router.put(
    "/storage-clusters/{name}",
    tags=["clusters"],
    summary="Give the storage service its kubeconfig of a registered cluster (platform admin)",
)
async def register_storage_cluster(
    name: ClusterName, body: StorageClusterRegistration, identity: CurrentIdentity,
    clusters: ClustersPart,
) -> StorageCluster:  # fmt: skip
    return await clusters.register(identity, name, body.kubeconfig.get_secret_value())


@router.get(
    "/storage-clusters",
    tags=["clusters"],
    summary="The clusters the storage service reaches (platform admin)",
)
async def list_storage_clusters(
    identity: CurrentIdentity, clusters: ClustersPart
) -> list[StorageCluster]:
    return await clusters.list(identity)


@router.delete(
    "/storage-clusters/{name}",
    status_code=status.HTTP_204_NO_CONTENT,
    tags=["clusters"],
    summary="Take the storage service's access to a cluster away (platform admin)",
)
async def forget_storage_cluster(
    name: str, identity: CurrentIdentity, clusters: ClustersPart
) -> Response:
    await clusters.forget(identity, name)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
