"""Which cluster a new workload goes to (decision 129).

Of the clusters in the region asked for (any, if none was) whose Ready nodes have the
workload's GPU kind in the zones it may run in, and that take new workloads (active,
and answering at their last look): one whose warm stock of the spec had a unit
available at the leader's last look (a start there skips the scheduler and the image
pull); else the home cluster if it is one of them; else the one with the most units
of the kind free at that look (a cordoned or quarantined node's are not free), by
name on a tie. A cluster not looked at yet offers
nothing, but the home cluster, which is taken as holding every kind until its first
look. A workload whose kind no cluster has goes to the home cluster, where it fails
as unschedulable with the reason, as it always did.

A start again stays in the workload's cluster (its pod's storages and node are
there): it is refused while that cluster takes no new workloads.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from gpucloud_libs.clock import now_as_stored
from gpucloud_libs.errors import Conflict, ValidationFailed
from gpucloud_libs.naming import GPU_RESOURCE

from ..admission import Placed
from ..documents import SpecDoc
from .documents import ClusterDoc
from .schemas import ClusterState
from .store import ClusterStore

#: How long the clusters are taken as read: a cordon reaches every replica's
#: admissions within this.
STATE_READ_S = 1.0


class Placement:
    def __init__(self, clusters: ClusterStore, home: str) -> None:
        self._clusters = clusters
        self._home = home
        self._read: tuple[float, list[ClusterDoc]] | None = None  # (read at, clusters)
        #: Starts this replica sent to a cluster for its warm units, per (cluster,
        #: spec), since the look that counted them: no more than the look found.
        self._sent_warm: dict[tuple[str, str], tuple[datetime, int]] = {}

    async def choose(
        self, spec: SpecDoc, *, region: str | None, zones: list[str], volumes: bool = False
    ) -> Placed:
        """The cluster a new workload of the spec goes to (`choose_cluster`). One that
        mounts volume storages goes to the home cluster, where volumes are (a 422 where
        that cannot be); object storages reach any cluster the storage service was
        given access to."""
        gpu_type, resource = spec["gpu_type"], spec.get("gpu_resource", GPU_RESOURCE)
        docs = await self._docs()
        if volumes:
            docs = home_for_volumes(docs, gpu_type, resource, region=region, zones=zones)
        spent = self._warm_spent(docs, spec["_id"])
        chosen = choose_cluster(
            docs, gpu_type, resource, region=region, zones=zones, spec_name=spec["_id"],
            warm_spent=spent,
        )  # fmt: skip
        doc = next(doc for doc in docs if doc["_id"] == chosen)
        if _warm(doc, spec["_id"], spent) and doc["status"] is not None:
            self._sent_warm[chosen, spec["_id"]] = (
                doc["status"]["checked_at"], spent.get(chosen, 0) + 1,
            )  # fmt: skip
        return Placed(chosen, doc["region"])

    def _warm_spent(self, docs: list[ClusterDoc], spec_name: str) -> dict[str, int]:
        """Per cluster, the warm units of the spec this replica has sent starts to since
        the cluster's last look."""
        spent = {}
        for doc in docs:
            sent = self._sent_warm.get((doc["_id"], spec_name))
            if sent is not None and doc["status"] is not None:
                if sent[0] == doc["status"]["checked_at"]:
                    spent[doc["_id"]] = sent[1]
                else:
                    del self._sent_warm[doc["_id"], spec_name]  # a new look counts afresh
        return spent

    async def check_open(self, cluster: str) -> None:
        """A 409 while `cluster` takes no new workloads (a start again stays in it)."""
        doc = next((doc for doc in await self._docs() if doc["_id"] == cluster), None)
        if doc is None:
            raise Conflict(
                f"cluster {cluster!r} is no longer registered: start a new instance instead",
                cluster=cluster,
            )  # fmt: skip
        if not _takes_workloads(doc):
            raise Conflict(
                f"cluster {cluster!r} takes no new workloads now: it is {_why_closed(doc)}",
                cluster=cluster, state=doc["state"],
            )  # fmt: skip

    def cluster_of(self, doc: Mapping[str, Any]) -> str:
        """The cluster a workload's document says it was placed in."""
        cluster: str = doc.get("cluster") or self._home
        return cluster

    def forget(self) -> None:
        """A cluster's state was just set here: read them again."""
        self._read = None

    async def _docs(self) -> list[ClusterDoc]:
        read = self._read
        if read is not None and time.monotonic() - read[0] < STATE_READ_S:
            return read[1]
        docs = await self._clusters.list()
        if not any(doc["_id"] == self._home for doc in docs):
            # Not recorded yet (the service is starting): the home cluster is active.
            docs.append(
                ClusterDoc(
                    _id=self._home,
                    region="",
                    zones=[],
                    home=True,
                    server=None,
                    uid=None,
                    sealed_kubeconfig=None,
                    state=ClusterState.ACTIVE.value,
                    status=None,
                    created_at=now_as_stored(),
                )
            )
        self._read = (time.monotonic(), docs)
        return docs


def choose_cluster(
    docs: list[ClusterDoc], gpu_type: str, resource: str, *, region: str | None,
    zones: list[str], spec_name: str | None = None, warm_spent: Mapping[str, int] | None = None,
) -> str:  # fmt: skip
    """Of `docs`, the cluster a new workload of the GPU kind (and spec) goes to: a
    422 for a region no cluster is in, or one none of whose clusters has the kind; a
    409 when none that has it takes new workloads now. `warm_spent`: per cluster, the
    warm units of the spec already sent starts since its last look."""

    if region is not None and not any(doc["region"] == region for doc in docs):
        regions = sorted({doc["region"] for doc in docs if doc["region"]})
        raise ValidationFailed(
            f"no cluster is in region {region!r}; the regions are {', '.join(regions)}",
            field="region", regions=regions,
        )  # fmt: skip
    asked = [doc for doc in docs if region is None or doc["region"] == region]
    holding = [doc for doc in asked if _offers(doc, gpu_type, resource, zones)]
    if not holding and region is not None:
        with_kind = sorted(
            {doc["region"] for doc in docs if _offers(doc, gpu_type, resource, zones)}
        )
        raise ValidationFailed(
            f"no cluster in region {region!r} has {gpu_type} GPUs"
            + (f"; region {', '.join(with_kind)} has them" if with_kind else ""),
            field="region", regions=with_kind,
        )  # fmt: skip
    # No cluster has the kind: the home cluster, where it fails with the reason.
    holding = holding or [doc for doc in asked if doc["home"]]
    open_ = [doc for doc in holding if _takes_workloads(doc)]
    if not open_:
        closed = "; ".join(f"cluster {d['_id']!r} is {_why_closed(d)}" for d in holding)
        raise Conflict(
            f"no cluster takes new workloads now: {closed}", region=region,
        )  # fmt: skip
    open_.sort(
        key=lambda doc: (
            not _warm(doc, spec_name, warm_spent or {}),
            not doc["home"],
            -_free(doc, gpu_type, resource),
            doc["_id"],
        )
    )
    return open_[0]["_id"]


def home_for_volumes(
    docs: list[ClusterDoc], gpu_type: str, resource: str, *, region: str | None, zones: list[str]
) -> list[ClusterDoc]:
    """The clusters a workload that mounts volumes may go to: the home cluster alone,
    since a volume is a claim there; a 422 saying so when the region asked for, or the
    GPUs, are elsewhere."""
    home = [doc for doc in docs if doc["home"]]
    where = home[0]["region"] if home and home[0]["region"] else "the home cluster's"
    if region is not None and not any(doc["region"] == region for doc in home):
        raise ValidationFailed(
            f"a workload that mounts volume storages runs in region {where}, not "
            f"{region!r}: volumes are mounted there alone", field="region",
        )  # fmt: skip
    if not any(_offers(doc, gpu_type, resource, zones) for doc in home) and any(
        _offers(doc, gpu_type, resource, zones) for doc in docs
    ):
        raise ValidationFailed(
            f"a workload that mounts volume storages runs in region {where}, which has no "
            f"{gpu_type} GPUs: volumes are mounted there alone", field="volumes",
        )  # fmt: skip
    return home


def _takes_workloads(doc: ClusterDoc) -> bool:
    """Active, and answering at its last look (the home cluster, which the service
    itself runs against, is taken at its word)."""
    if doc["state"] != ClusterState.ACTIVE:
        return False
    return doc["home"] or doc["status"] is None or doc["status"]["reachable"]


def _why_closed(doc: ClusterDoc) -> str:
    if doc["state"] != ClusterState.ACTIVE:
        return str(doc["state"])
    return "not answering"


def _offers(doc: ClusterDoc, gpu_type: str, resource: str, zones: list[str]) -> bool:
    """Whether its Ready nodes have the GPU kind, in one of `zones` (any, if empty)."""
    if zones and doc["zones"] and not set(zones) & set(doc["zones"]):
        return False
    if doc["status"] is None:
        return doc["home"]  # not looked at yet: the home cluster holds what it held
    return any(
        g["gpu_type"] == gpu_type and g["resource"] == resource for g in doc["status"]["gpus"]
    )


def _warm(doc: ClusterDoc, spec_name: str | None, spent: Mapping[str, int]) -> bool:
    """Whether its warm stock of the spec had a unit available at the last look that
    no start has been sent to since."""
    if spec_name is None or doc["status"] is None:
        return False
    return doc["status"].get("warm", {}).get(spec_name, 0) > spent.get(doc["_id"], 0)


def _free(doc: ClusterDoc, gpu_type: str, resource: str) -> int:
    """Its units of the kind free at the last look (its capacity, where the leader
    had no count of what is free)."""
    for gpus in doc["status"]["gpus"] if doc["status"] else []:
        if gpus["gpu_type"] == gpu_type and gpus["resource"] == resource:
            return gpus.get("free", gpus["capacity"])
    return 0
