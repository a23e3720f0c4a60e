"""The stored documents of clusters."""

from __future__ import annotations

from datetime import datetime
from typing import NotRequired, TypedDict


class ClusterGpusDoc(TypedDict):
    gpu_type: str
    #: Units of this kind on Ready nodes: whole GPUs, or `resource`'s shares.
    resource: str
    capacity: int
    #: Of them, free on usable nodes (not cordoned or quarantined), as the leader's
    #: watch saw them; absent while it had not listed the cluster.
    free: NotRequired[int]


class ClusterStatusDoc(TypedDict):
    """What the last look at the cluster found (`observation.look`)."""

    reachable: bool
    checked_at: datetime
    #: Since when it has not answered (None while it answers).
    unreachable_since: datetime | None
    version: str | None
    nodes: int
    ready_nodes: int
    zones: list[str]
    gpus: list[ClusterGpusDoc]
    error: str | None
    #: Its warm stocks' available units per spec, as the leader held them.
    warm: NotRequired[dict[str, int]]


class ClusterDoc(TypedDict):
    """A Kubernetes cluster workloads are placed in. The home cluster is the service's
    own (its settings' kubeconfig, never stored); any other is reached through the
    kubeconfig it was registered with, sealed (libs sealing)."""

    _id: str  # the cluster's name
    region: str
    zones: list[str]
    home: bool
    #: The API server its kubeconfig reaches, and the cluster's identity (its
    #: kube-system namespace's uid): one cluster is registered once, by any address.
    server: str | None
    uid: str | None
    sealed_kubeconfig: str | None
    #: active: takes new workloads; cordoned: none; draining: none, and its workloads
    #: are asked to stop.
    state: str
    status: ClusterStatusDoc | None
    created_at: datetime
