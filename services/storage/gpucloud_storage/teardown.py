"""Storage teardown: the backend side removed, accessors revoked, the last usage sample
sent, the record forgotten. Every step is idempotent, so a failed teardown stays
`deleting` and the sweep runs it again; a bucket of many objects is emptied in
the background, one teardown at a time per storage."""

from __future__ import annotations

import asyncio
import logging

from gpucloud_libs.clock import now
from gpucloud_libs.errors import Conflict
from gpucloud_libs.kube import KubeClient
from gpucloud_libs.naming import storage_claim_name

from .accessors import Accessors
from .backend import BucketNotEmpty, ObjectBackend
from .documents import StorageDoc, volume_namespace
from .presigners import Presigners
from .store import StorageStore
from .usage import UsagePublisher

log = logging.getLogger(__name__)


class StorageNotEmpty(Conflict):
    code = "storage_not_empty"
    title = "Storage not empty"


class Teardown:
    def __init__(
        self,
        backend: ObjectBackend,
        kube: KubeClient,
        storages: StorageStore,
        accessors: Accessors,
        usage: UsagePublisher,
        presigners: Presigners,
    ) -> None:
        self._backend = backend
        self._presigners = presigners
        self._kube = kube
        self._storages = storages
        self._accessors = accessors
        self._usage = usage
        self._background: set[asyncio.Task[bool]] = set()
        self._deleting: set[str] = set()  # storage keys being deleted by this process

    async def finish(self, doc: StorageDoc) -> bool:
        """Remove the backend side, revoke accessors, publish the last sample, forget it.

        False when something failed on the way: the storage stays `deleting` and
        the sweep tries again (every step is idempotent).
        """
        try:
            if doc["kind"] == "object":
                await self._accessors.revoke_all(doc["tenant_id"], doc["storage_id"])
                await self._presigners.revoke(doc)
                await self._backend.delete_bucket(doc["bucket"], force=bool(doc.get("force")))
            else:
                await self._kube.delete(
                    "PersistentVolumeClaim",
                    volume_namespace(doc),
                    storage_claim_name(doc["storage_id"]),
                )
            # Metering bills up to the last sample: a zero closes the storage's meter.
            await self._usage.publish(doc, 0, now())
        except BucketNotEmpty:
            await self._storages.update(doc["_id"], {"state": "ready", "message": None})
            raise StorageNotEmpty(
                f"storage {doc['storage_id']!r} holds objects; delete them, or pass force=true"
            ) from None
        except Exception as error:  # Kafka's errors too: anything is retried by the sweep
            log.warning("deletion failed", extra={"storage": doc["_id"], "error": str(error)})
            await self._storages.update(
                doc["_id"], {"message": f"deletion retrying: {error}"[:300]}
            )
            return False
        await self._storages.remove(doc["_id"])
        log.info("storage deleted", extra={"storage": doc["_id"]})
        return True

    def spawn(self, doc: StorageDoc) -> None:
        """Finish a deletion in the background; the sweep leaves it alone meanwhile."""
        if doc["_id"] in self._deleting:
            return
        self._deleting.add(doc["_id"])
        task = asyncio.ensure_future(self.finish(doc))
        self._background.add(task)

        def done(finished: asyncio.Task[bool]) -> None:
            self._background.discard(finished)
            self._deleting.discard(doc["_id"])

        task.add_done_callback(done)

    async def close(self) -> None:
        for task in list(self._background):
            task.cancel()

    async def delete_all_of_tenant(self, tenant_id: str) -> None:
        """A deleted tenant's storages go, objects included, in the background."""
        for doc in await self._storages.of_tenant(tenant_id):
            deleting = doc
            if doc["state"] != "deleting":
                changes = {"state": "deleting", "force": True}
                deleting = await self._storages.update(doc["_id"], changes) or doc
            self.spawn(deleting)
