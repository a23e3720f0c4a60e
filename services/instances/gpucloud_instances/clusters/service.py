"""Clusters as the platform admin manages them: registered with a kubeconfig that is
checked (it reaches its API server and holds the rights the platform needs) and
sealed at rest (`GPUCLOUD_CLUSTER_SECRETS_KEY`), never shown again; cordoned,
drained, and deleted once no workload runs in it. The home cluster is the service's
own, named by its settings and recorded at start.

Each cluster is looked at every resync (`look_all`, the leader's): reachability,
version, nodes, zones and GPU capacity, shown with it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any, Protocol

from faststream.kafka import KafkaBroker

from gpucloud_libs.clock import aware, aware_or_none, now, now_as_stored
from gpucloud_libs.errors import Conflict, DependencyUnavailable, NotFound, ValidationFailed
from gpucloud_libs.events import ClusterNodes
from gpucloud_libs.gpu_shares import GpuShare
from gpucloud_libs.identity import Identity
from gpucloud_libs.kafka import publish_event
from gpucloud_libs.kube import KubeClient, KubeError
from gpucloud_libs.kubeconfigs import (
    check_api_server,
    kubeconfig_server,
    parsed_kubeconfig,
    registered_client,
    registered_kubeconfig,
)
from gpucloud_libs.sealing import SecretBox
from gpucloud_libs.topics import CLUSTERS

from ..controller.runtimes import ClusterRuntimes
from ..settings import InstancesSettings
from ..store import DuplicateInstance
from .documents import ClusterDoc, ClusterStatusDoc
from .observation import (
    cluster_uid,
    excess_rights,
    look,
    missing_rights,
    rights_review,
    unreachable,
)
from .placement import Placement
from .schemas import Cluster, ClusterCreate, ClusterGpus, ClusterHealth, ClusterState, Region
from .store import ClusterStore

log = logging.getLogger(__name__)

CLUSTERS_SOURCE = "/gpucloud/instances/clusters"


class ClusterUse(Protocol):
    """What a cluster holds of the platform's (stores.py): it is deleted holding none."""

    async def workloads(self, cluster: str) -> int:
        """Its live workloads, by the cluster each records."""
        ...

    async def stocked_units(self, cluster: str) -> int:
        """The warm units it keeps, or is to keep."""
        ...


class Clusters:
    def __init__(
        self,
        settings: InstancesSettings,
        clusters: ClusterStore,
        box: SecretBox,
        home: KubeClient,
        use: ClusterUse,
        placement: Placement,
        broker: KafkaBroker,
    ) -> None:
        self._settings = settings
        self._clusters = clusters
        self._box = box
        self._home = home
        self._use = use
        self._placement = placement
        self._broker = broker
        #: Each cluster's nodes as last said on the clusters topic.
        self._said: dict[str, tuple[str, ...]] = {}

    async def record_home(self) -> None:
        """The service's own cluster, as its settings name it (at start)."""
        try:
            uid: str | None = await cluster_uid(self._home)
        except (DependencyUnavailable, KubeError) as error:
            log.warning(
                "the home cluster's identity could not be read", extra={"error": str(error)}
            )
            uid = None
        await self._clusters.set_home(
            ClusterDoc(
                _id=self._settings.cluster_name, region=self._settings.cluster_region,
                zones=list(self._settings.cluster_zones), home=True,
                server=(self._home.api.configuration.host or "").rstrip("/"), uid=uid,
                sealed_kubeconfig=None, state=ClusterState.ACTIVE.value, status=None,
                created_at=now_as_stored(),
            )
        )  # fmt: skip

    async def register(self, identity: Identity, body: ClusterCreate) -> Cluster:
        identity.require_role("platform-admin")
        text = body.kubeconfig.get_secret_value()
        config = parsed_kubeconfig(text)
        registered_kubeconfig(config)  # data alone, before anything else reads it
        server = kubeconfig_server(config)
        others = await self._clusters.list()
        not_registered(body.name, server, None, others)
        await check_api_server(
            server, loopback_only=self._settings.loopback_only,
            allowed_networks=tuple(self._settings.cluster_api_networks),
        )  # fmt: skip
        status, uid = await _checked(body.name, config, server, others)
        doc = ClusterDoc(
            _id=body.name, region=body.region, zones=list(body.zones), home=False,
            server=server, uid=uid, sealed_kubeconfig=self._box.seal(text),
            state=ClusterState.ACTIVE.value, status=status, created_at=now_as_stored(),
        )  # fmt: skip
        try:
            await self._clusters.insert(doc)
        except DuplicateInstance:
            raise Conflict(f"cluster {body.name!r} is registered", cluster=body.name) from None
        log.info("cluster registered", extra={"cluster": body.name, "region": body.region})
        return await self._view(doc)

    async def regions(self) -> list[Region]:
        """Every region, for anyone signed in (the console's and CLI's pickers)."""
        regions: dict[str, Region] = {}
        for doc in await self._clusters.list():
            region = regions.setdefault(
                doc["region"], Region(name=doc["region"], zones=[], gpu_types=[], open=False)
            )
            status = doc["status"]
            region.zones = sorted({*region.zones, *doc["zones"]})
            types = {g["gpu_type"] for g in status["gpus"]} if status else set()
            region.gpu_types = sorted({*region.gpu_types, *types})
            region.open = region.open or (
                doc["state"] == ClusterState.ACTIVE and (status is None or status["reachable"])
            )
        return [regions[name] for name in sorted(regions)]

    async def list(self, identity: Identity) -> list[Cluster]:
        identity.require_role("platform-admin")
        return [await self._view(doc) for doc in await self._clusters.list()]

    async def get(self, identity: Identity, name: str) -> Cluster:
        identity.require_role("platform-admin")
        return await self._view(await self._existing(name))

    async def set_state(self, identity: Identity, name: str, state: ClusterState) -> Cluster:
        """Cordon (no new placements), drain (none, before it is deleted), or make
        active again."""
        identity.require_role("platform-admin")
        doc = await self._clusters.set_state(name, state.value)
        self._placement.forget()
        if doc is None:
            raise _no_such(name)
        log.info("cluster state set", extra={"cluster": name, "state": state.value})
        return await self._view(doc)

    async def delete(self, identity: Identity, name: str) -> None:
        identity.require_role("platform-admin")
        doc = await self._existing(name)
        if doc["home"]:
            raise Conflict(
                f"cluster {name!r} is the service's own (its settings' kubeconfig); "
                "it cannot be deleted", cluster=name,
            )  # fmt: skip
        running = await self._use.workloads(name)
        if running:
            raise Conflict(
                f"cluster {name!r} still runs {running} workloads; drain it and wait until "
                "they have ended", cluster=name, workloads=running,
            )  # fmt: skip
        stocked = await self._use.stocked_units(name)
        if stocked:
            raise Conflict(
                f"cluster {name!r} still keeps {stocked} warm units; remove its stocks "
                "first", cluster=name, stockedUnits=stocked,
            )  # fmt: skip
        await self._clusters.remove(name)

    async def look_all(self, runtimes: ClusterRuntimes) -> None:
        """Drive every registered cluster and no other, look at each once and record
        what was seen (the leader's clusters pass). A cluster's nodes are those its
        watch holds, once synced: listing them every pass would read every node."""
        docs = await self._clusters.list()
        registered = {doc["_id"] for doc in docs}
        runtimes.registered(registered)
        for gone in runtimes.driven() - registered - {runtimes.home.name}:
            await runtimes.close(gone)  # deleted, maybe through another replica
            await self._say_nodes(gone, ())
        for doc in docs:
            if doc["_id"] not in runtimes.driven():
                kubeconfig = self._kubeconfig(doc)
                if kubeconfig is not None:
                    await runtimes.open(doc["_id"], kubeconfig)
        statuses = await asyncio.gather(*(self._look(doc, runtimes) for doc in docs))
        for doc, status in zip(docs, statuses, strict=True):
            if status is not None:
                await self._clusters.set_status(doc["_id"], status)
            if not doc["home"] and (seen := status or doc["status"]) is not None:
                self._note_answers(runtimes, doc["_id"], seen)
        for runtime in runtimes:
            if not runtime.home:
                await self._say_nodes(runtime.name, runtime.cache.nodes)

    async def _say_nodes(self, cluster: str, nodes: Iterable[str]) -> None:
        """Tell the monitoring service a registered cluster's nodes (none: it is
        gone), whose agents' telemetry it then takes; when they changed since this
        replica last said them (the monitoring service keeps what was said)."""
        listed = tuple(sorted(nodes))
        if self._said.get(cluster) == listed:
            return
        said = ClusterNodes(cluster=cluster, nodes=listed, at=now())
        await publish_event(self._broker, CLUSTERS, said, source=CLUSTERS_SOURCE)
        self._said[cluster] = listed

    def _note_answers(self, runtimes: ClusterRuntimes, name: str, status: ClusterStatusDoc) -> None:
        """A registered cluster silent for longer than the grace is lost (decision
        130): its workloads are given up, billed up to the first look that found it
        silent. The home cluster is never: the controller's lease lives in it."""
        since = status["unreachable_since"]
        if status["reachable"] or since is None:
            runtimes.mark_answering(name)
        elif (now() - aware(since)).total_seconds() > self._settings.cluster_lost_grace_s:
            runtimes.mark_lost(name, aware(since))

    async def _look(self, doc: ClusterDoc, runtimes: ClusterRuntimes) -> ClusterStatusDoc | None:
        runtime = runtimes.home if doc["home"] else runtimes.opened(doc["_id"])
        if runtime is None:
            if doc["home"]:
                return None
            # Sealed with another key, not a kubeconfig, or refused by its loader (logged).
            return unreachable("its kubeconfig cannot be used", now_as_stored(), doc["status"])
        if not runtime.ready:
            return await look(runtime.kube, now_as_stored(), doc["status"])
        status = await look(
            runtime.kube, now_as_stored(), doc["status"], list(runtime.cache.nodes.values())
        )
        free = runtime.cache.gpu_accounting().free
        for gpus in status["gpus"]:
            gpus["free"] = free.get(GpuShare(gpus["resource"]).capacity_key(gpus["gpu_type"]), 0)
        if status["reachable"]:
            status["warm"] = runtime.stocks.available()
        return status

    async def kubeconfig_of(self, name: str) -> dict[str, Any] | None:
        """A registered cluster's kubeconfig (not the home cluster's: the service's own
        settings name it); None when there is none of that name, or it cannot be used."""
        doc = await self._clusters.get(name)
        return None if doc is None or doc["home"] else self._kubeconfig(doc)

    def _kubeconfig(self, doc: ClusterDoc) -> dict[str, Any] | None:
        """The registered cluster's kubeconfig; None when it cannot be used (logged)."""
        text = self._box.open(doc["sealed_kubeconfig"] or "")
        if text is None:
            log.warning(
                "a cluster's kubeconfig was sealed with another key", extra={"cluster": doc["_id"]}
            )
            return None
        try:
            return parsed_kubeconfig(text)
        except ValidationFailed as error:
            log.warning(
                "a cluster's kubeconfig cannot be read",
                extra={"cluster": doc["_id"], "error": error.detail},
            )
            return None

    async def _existing(self, name: str) -> ClusterDoc:
        doc = await self._clusters.get(name)
        if doc is None:
            raise _no_such(name)
        return doc

    async def _view(self, doc: ClusterDoc) -> Cluster:
        status = doc["status"]
        return Cluster(
            name=doc["_id"], region=doc["region"], zones=doc["zones"], home=doc["home"],
            state=ClusterState(doc["state"]), workloads=await self._use.workloads(doc["_id"]),
            health=None if status is None else _health(status), created_at=aware(doc["created_at"]),
        )  # fmt: skip


def _no_such(name: str) -> NotFound:
    return NotFound(f"cluster {name!r} does not exist; GET /v1/clusters lists them")


def _health(status: ClusterStatusDoc) -> ClusterHealth:
    return ClusterHealth(
        reachable=status["reachable"], checked_at=aware(status["checked_at"]),
        unreachable_since=aware_or_none(status["unreachable_since"]), version=status["version"],
        nodes=status["nodes"], ready_nodes=status["ready_nodes"], zones=status["zones"],
        gpus=[
            ClusterGpus(
                gpu_type=g["gpu_type"], resource=g["resource"], capacity=g["capacity"],
                free=g.get("free"),
            )
            for g in status["gpus"]
        ],
        error=status["error"], warm=status.get("warm", {}),
    )  # fmt: skip


def not_registered(name: str, server: str, uid: str | None, others: list[ClusterDoc]) -> None:
    """A 409 when the name, the API server or the cluster itself is registered."""
    for other in others:
        if other["_id"] == name:
            raise Conflict(f"cluster {name!r} is registered", cluster=name)
        if other.get("server") == server or (uid is not None and other.get("uid") == uid):
            raise Conflict(f"that cluster is registered as {other['_id']!r}", cluster=other["_id"])


async def _checked(
    name: str, config: dict[str, Any], server: str, others: list[ClusterDoc]
) -> tuple[ClusterStatusDoc, str]:
    """What a first look at the cluster saw; a 409 when it is registered already (by
    its identity, whatever the address), a 422 when it cannot be reached, or the
    kubeconfig lacks rights the platform needs there or holds rights it must not
    (review L3: a leaked kubeconfig of the platform's is then no cluster admin's)."""
    kube = registered_client(config)
    try:
        try:
            await kube.connect()
        except Exception as error:  # the loader's errors are of many kinds
            # Its type alone: a loader's message may quote the kubeconfig (review N2).
            raise ValidationFailed(
                f"the kubeconfig cannot be used ({type(error).__name__})", field="kubeconfig"
            ) from None
        status = await look(kube, now_as_stored(), None)
        if not status["reachable"]:
            raise ValidationFailed(
                f"cluster {name!r} cannot be reached: {status['error']}", field="kubeconfig"
            )
        uid = await _uid_if_readable(kube)
        not_registered(name, server, uid, others)
        rules, incomplete = await rights_review(kube)
        missing = missing_rights(rules)
        if missing:
            unsure = " (the API server could not list them all)" if incomplete else ""
            raise ValidationFailed(
                f"the kubeconfig lacks rights the platform needs in {name!r}{unsure}: "
                + ", ".join(missing[:8]) + (f" and {len(missing) - 8} more" if len(missing) > 8 else ""),
                field="kubeconfig", missing=missing,
            )  # fmt: skip
        if excess := excess_rights(rules):
            raise ValidationFailed(
                f"the kubeconfig holds rights the platform must not have in {name!r}: "
                f"{', '.join(excess)}; give it the platform's role alone (the chart's "
                "ClusterRole for the instances service)",
                field="kubeconfig", excess=excess,
            )  # fmt: skip
        return status, uid or await cluster_uid(kube)
    finally:
        await kube.close()


async def _uid_if_readable(kube: KubeClient) -> str | None:
    """The cluster's identity, or None when the kubeconfig may not read it (it then
    lacks rights, which the rights review names)."""
    try:
        return await cluster_uid(kube)
    except KubeError:
        return None
