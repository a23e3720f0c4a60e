"""Attachments: what the instances service's instances get of their tenant's storages.

A volume mounts as its claim; an object storage arrives as an accessor of the
instance's own, in a Secret loaded as environment variables. Made once per
instance (a retry returns the same plan) and revoked when the instance ends. The
Secret is written in the cluster the instance runs in: the storage service's own,
or a registered one (clusters.py), where volumes cannot be attached.
"""

from __future__ import annotations

import logging

from gpucloud_libs.clock import now
from gpucloud_libs.errors import Conflict, DependencyUnavailable, Forbidden
from gpucloud_libs.identity import Identity
from gpucloud_libs.kube import KubeClient, KubeError
from gpucloud_libs.naming import (
    DEFAULT_PROJECT,
    project_namespace,
    storage_claim_name,
    storage_env_prefix,
    storage_secret_name,
)
from gpucloud_libs.project_shares import volume_refusal

from . import manifests
from .accessors import Accessors
from .backend import ObjectBackend
from .clusters import ClusterUnreachable, StorageClusters
from .documents import AttachmentDoc, StorageDoc, volume_namespace
from .ownership import OwnedStorages, StorageNotReady
from .schemas import AttachedStorage, AttachmentPlan, AttachmentRequest
from .store import AttachmentStore, StorageStore, storage_key

log = logging.getLogger(__name__)

#: Who made an instance's accessors (recorded on them).
INSTANCES_SERVICE = "service:instances"
#: The signer whose identities may make attachments: the instances service itself.
INSTANCES_SIGNER = "instances"


def attachment_plan(attachment: AttachmentDoc) -> AttachmentPlan:
    instance_id = attachment["instance_id"]
    return AttachmentPlan(
        instance_id=instance_id,
        storages=[
            AttachedStorage(
                storage_id=item["storage_id"],
                kind=item["kind"],
                claim_name=storage_claim_name(item["storage_id"])
                if item["kind"] == "volume"
                else None,
                secret_name=storage_secret_name(item["storage_id"], instance_id)
                if item["kind"] == "object"
                else None,
                env_prefix=storage_env_prefix(item["storage_id"])
                if item["kind"] == "object"
                else None,
            )
            for item in attachment["items"]
        ],
    )


class Attachments:
    def __init__(
        self,
        backend: ObjectBackend,
        kube: KubeClient,
        clusters: StorageClusters,
        storages: StorageStore,
        attachments: AttachmentStore,
        accessors: Accessors,
        owned: OwnedStorages,
    ) -> None:
        self._backend = backend
        self._kube = kube
        self._clusters = clusters
        self._storages = storages
        self._attachments = attachments
        self._accessors = accessors
        self._owned = owned

    async def attach(
        self, identity: Identity, instance_id: str, body: AttachmentRequest
    ) -> AttachmentPlan:
        """What an instance mounts and loads, made once per instance (retries return it)."""
        if identity.issuer != INSTANCES_SIGNER:
            raise Forbidden("attachments are made by the instances service")
        tenant_id = identity.require_tenant()
        key = storage_key(tenant_id, instance_id)
        existing = await self._attachments.get(key)
        if existing is not None:
            same = (
                existing.get("stay", 0), existing.get("cluster"),
                existing.get("project", DEFAULT_PROJECT),
            ) == (body.stay, body.cluster, body.project)  # fmt: skip
            if existing.get("complete") and same:
                return attachment_plan(existing)
            # An earlier attempt died half-way, or an earlier stay's is still here (its
            # end not yet heard of): undo it and start over.
            await self.release(tenant_id, instance_id)
        wanted = {item.storage_id: item for item in body.storages}
        storages = [
            await self._owned.for_work(identity, storage_id, body.project) for storage_id in wanted
        ]
        kube = await self._kube_of(body.cluster, storages)
        _refuse_volumes_of_other_projects(body.project, storages)
        attachment: AttachmentDoc = {
            "_id": key,
            "tenant_id": tenant_id,
            "instance_id": instance_id,
            "storage_ids": list(wanted),
            "items": [
                {
                    "storage_id": doc["storage_id"],
                    "kind": doc["kind"],
                    "read_only": wanted[doc["storage_id"]].read_only,
                }
                for doc in storages
            ],
            "accessor_ids": [],
            "created_at": now(),
            "stay": body.stay,
            "cluster": body.cluster,
            "project": body.project,
        }
        if not await self._attachments.insert(attachment):
            raise Conflict("a concurrent call is attaching this instance's storages; retry")
        try:
            for doc in storages:
                # A delete that began after our check now sees this attachment; one
                # that began before it shows here as `deleting`.
                fresh = await self._storages.get(doc["_id"])
                if fresh is None or fresh["state"] != "ready":
                    raise StorageNotReady(f"storage {doc['storage_id']!r} is being deleted")
                if doc["kind"] == "object":
                    await self._grant_instance(
                        kube, doc, instance_id, wanted[doc["storage_id"]].read_only,
                        project_namespace(tenant_id, body.project),
                    )  # fmt: skip
        except BaseException:
            await self.release(tenant_id, instance_id)
            raise
        await self._attachments.mark_complete(key)
        return attachment_plan(attachment)

    async def _kube_of(self, cluster: str | None, storages: list[StorageDoc]) -> KubeClient:
        """Where the instance's Secrets go: its cluster (None: this service's own). A
        409 for a volume, or a cluster registered without this service's access."""
        if cluster is None:
            return self._kube
        _refuse_volumes(
            storages, f"cannot be attached in cluster {cluster!r}: volumes are mounted in the "
            "home cluster alone", cluster=cluster,
        )  # fmt: skip
        try:
            return await self._clusters.client(cluster)
        except ClusterUnreachable as error:
            raise Conflict(str(error), cluster=cluster) from None

    async def _grant_instance(
        self, kube: KubeClient, storage: StorageDoc, instance_id: str, read_only: bool,
        namespace: str,
    ) -> None:  # fmt: skip
        accessor, secret = await self._accessors.issue(
            storage, "read-only" if read_only else "read-write", expires_at=None, name=None,
            instance_id=instance_id, created_by=INSTANCES_SERVICE,
        )  # fmt: skip
        variables = {
            "AWS_ACCESS_KEY_ID": accessor["_id"],
            "AWS_SECRET_ACCESS_KEY": secret,
            "AWS_ENDPOINT_URL": self._backend.public_endpoint,
            "AWS_REGION": self._backend.region,
            "BUCKET": storage["bucket"],
        }
        await kube.ensure_whole(
            manifests.credentials_secret(
                namespace, storage["tenant_id"],
                storage["storage_id"], instance_id, variables,
            )
        )  # fmt: skip

    async def release_ended(
        self, instances: list[tuple[str, str]], *, ended_at: dict[str, int] | None = None
    ) -> None:
        """Release the storages of instances that ended (tenant, instance pairs). With
        `ended_at` (key -> the ending event's sequence), only an attachment made for a
        stay that began before that end: a stay started since keeps its own."""
        keys = {
            storage_key(tenant_id, instance_id): (tenant_id, instance_id)
            for tenant_id, instance_id in instances
        }
        for key, stay in (await self._attachments.stays(list(keys))).items():
            if ended_at is not None and stay > ended_at.get(key, stay):
                continue  # made for a stay that began after this end
            await self.release(*keys[key])

    async def release(self, tenant_id: str, instance_id: str) -> None:
        """Revoke what an instance was given and forget its attachment (idempotent)."""
        key = storage_key(tenant_id, instance_id)
        attachment = await self._attachments.get(key)
        if attachment is None:
            return
        # Every accessor first: what the Secrets hold stops working whatever comes next.
        for storage_id in attachment["storage_ids"]:
            await self._accessors.revoke_all(tenant_id, storage_id, instance_id=instance_id)
        names = [storage_secret_name(sid, instance_id) for sid in attachment["storage_ids"]]
        cluster = attachment.get("cluster")
        namespace = project_namespace(tenant_id, attachment.get("project", DEFAULT_PROJECT))
        if cluster is None:
            for name in names:
                await self._kube.delete("Secret", namespace, name)
        else:
            await self._delete_elsewhere(cluster, namespace, names)
        await self._attachments.remove(key)
        log.info("storages released", extra={"tenant": tenant_id, "instance": instance_id})

    async def _delete_elsewhere(self, cluster: str, namespace: str, names: list[str]) -> None:
        """The Secrets of an attachment in another cluster, as far as it answers: one
        that does not (lost, or its access taken back) keeps them, their accessors
        revoked, and holds up no other release (they go with the tenant's namespace)."""
        try:
            kube = await self._clusters.client(cluster)
            for name in names:
                await kube.delete("Secret", namespace, name)
        except (ClusterUnreachable, DependencyUnavailable, KubeError) as error:
            await self._clusters.forget_client(cluster)
            log.warning(
                "an attachment's cluster did not answer: its Secrets are left there, their "
                "accessors revoked", extra={"cluster": cluster, "error": str(error)[:300]},
            )  # fmt: skip


def _refuse_volumes(storages: list[StorageDoc], reason: str, **context: str) -> None:
    """A 409 for the first volume among `storages`: it cannot be mounted where the work
    runs, for `reason`."""
    for doc in storages:
        if doc["kind"] == "volume":
            raise Conflict(f"volume storage {doc['storage_id']!r} {reason}", **context)


def _refuse_volumes_of_other_projects(project: str, storages: list[StorageDoc]) -> None:
    """A volume's claim lives in its project's namespace, and a pod mounts no claim of
    another namespace: a volume is mounted by its own project's work alone (decision
    140), a 409."""
    for doc in storages:
        if doc["kind"] == "volume" and volume_namespace(doc) != project_namespace(
            doc["tenant_id"], project
        ):
            raise volume_refusal(doc["storage_id"], project)
