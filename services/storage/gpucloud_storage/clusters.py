"""The registered clusters the storage service writes instances' credentials in.

An instance placed in another cluster than the storage service's own gets its object
storages' credentials as a Secret in its tenant namespace there, written by the
storage service as in its own cluster: the instances service may write no Secret but
image pull Secrets, and holds no credentials of the storage service. So the operator
gives the storage service its own kubeconfig for each such cluster, under the name
the cluster is registered by (`PUT /v1/storage-clusters/{name}`; `gpucloud clusters
register --storage-kubeconfig` does both). It is sealed at rest
(GPUCLOUD_STORAGE_SECRETS_KEY) and never returned.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime
from typing import Any, TypedDict

from gpucloud_libs.clock import now
from gpucloud_libs.errors import NotFound, ValidationFailed
from gpucloud_libs.identity import Identity
from gpucloud_libs.kube import KubeClient
from gpucloud_libs.kubeconfigs import (
    ClientsByKubeconfig,
    check_api_server,
    kubeconfig_server,
    parsed_kubeconfig,
    registered_client,
    registered_kubeconfig,
)
from gpucloud_libs.mongo import Collection, Database, typed
from gpucloud_libs.sealing import SecretBox
from gpucloud_libs.settings import ServiceSettings

from .schemas import StorageCluster

log = logging.getLogger(__name__)

CLUSTERS = "clusters"
#: How long a kubeconfig's API server has to answer at registration.
ANSWER_TIMEOUT_S = 10.0


class StorageClusterDoc(TypedDict):
    _id: str  # the cluster's name, as it is registered with the instances service
    server: str
    sealed_kubeconfig: str
    registered_at: datetime


class ClusterUnreachable(Exception):
    """A workload's cluster the storage service has no kubeconfig for."""


class StorageClusters:
    def __init__(self, db: Database, box: SecretBox, settings: ServiceSettings) -> None:
        self._clusters: Collection[StorageClusterDoc] = typed(db, CLUSTERS, StorageClusterDoc)
        self._box = box
        self._clients = ClientsByKubeconfig()
        self._settings = settings

    async def register(self, identity: Identity, name: str, kubeconfig: str) -> StorageCluster:
        """Keep the storage service's kubeconfig for a cluster (replacing one kept)."""
        identity.require_role("platform-admin")
        config = parsed_kubeconfig(kubeconfig)
        registered_kubeconfig(config)  # data alone, before anything else reads it
        server = kubeconfig_server(config)
        await check_api_server(
            server, loopback_only=self._settings.loopback_only,
            allowed_networks=tuple(self._settings.cluster_api_networks),
        )  # fmt: skip
        await _answers(config)
        doc: StorageClusterDoc = {
            "_id": name, "server": server, "sealed_kubeconfig": self._box.seal(kubeconfig),
            "registered_at": now(),
        }  # fmt: skip
        await self._clusters.replace_one({"_id": name}, doc, upsert=True)
        await self.forget_client(name)  # a client of the kubeconfig it replaces
        log.info("cluster registered for storage", extra={"cluster": name})
        return _view(doc)

    async def list(self, identity: Identity) -> list[StorageCluster]:
        identity.require_role("platform-admin")
        return [_view(doc) async for doc in self._clusters.find({}).sort("_id", 1)]

    async def forget(self, identity: Identity, name: str) -> None:
        identity.require_role("platform-admin")
        if (await self._clusters.delete_one({"_id": name})).deleted_count == 0:
            raise NotFound(f"cluster {name!r} has no storage access here")
        await self.forget_client(name)
        log.info("cluster forgotten for storage", extra={"cluster": name})

    async def client(self, name: str) -> KubeClient:
        """A client of the registered cluster, opened on first use, and again when its
        kubeconfig was replaced (through any replica) since."""
        doc = await self._clusters.find_one({"_id": name})
        text = self._box.open(doc["sealed_kubeconfig"]) if doc else None
        if doc is None or text is None:
            raise ClusterUnreachable(
                f"cluster {name!r} has no storage access (`gpucloud clusters register "
                "--storage-kubeconfig`): storages cannot be handed to its pods"
            )
        return await self._clients.client(name, parsed_kubeconfig(text))

    async def forget_client(self, name: str) -> None:
        """Open the cluster's client afresh next time (it did not answer, or its
        kubeconfig was replaced)."""
        await self._clients.forget(name)

    async def close(self) -> None:
        await self._clients.close()


async def _answers(config: dict[str, Any]) -> None:
    """A 422 unless the kubeconfig reaches its API server."""
    client = registered_client(config)
    try:
        await client.connect()
        async with asyncio.timeout(ANSWER_TIMEOUT_S):
            await client.server_version()
    except Exception as error:  # the loader's and the connection's errors are of many kinds
        raise ValidationFailed(
            f"the kubeconfig does not reach its API server: {type(error).__name__}",
            field="kubeconfig",
        ) from None
    finally:
        await client.close()


def _view(doc: StorageClusterDoc) -> StorageCluster:
    return StorageCluster(name=doc["_id"], server=doc["server"], registered_at=doc["registered_at"])
