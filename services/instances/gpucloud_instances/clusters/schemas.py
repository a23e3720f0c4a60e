"""Request and response models of the clusters API."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated

from pydantic import Field, SecretStr

from gpucloud_libs.http import ApiModel

#: A cluster's, region's or zone's name: a DNS label.
Label = Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", max_length=63)]


class ClusterState(StrEnum):
    ACTIVE = "active"
    CORDONED = "cordoned"
    DRAINING = "draining"


class ClusterCreate(ApiModel):
    name: Label
    region: Label
    #: The zones its nodes are in (topology.kubernetes.io/zone).
    zones: list[Label] = Field(min_length=1, max_length=32)
    #: The kubeconfig the platform reaches it with (YAML): its current context names
    #: the API server and a user with the rights the platform needs. Sealed at rest,
    #: never returned.
    kubeconfig: SecretStr = Field(min_length=1, max_length=256 * 1024)


class ClusterGpus(ApiModel):
    gpu_type: str = Field(alias="gpuType")
    resource: str
    capacity: int
    #: Free on usable nodes at the last look (None: not counted yet).
    free: int | None = None


class ClusterHealth(ApiModel):
    reachable: bool
    checked_at: datetime
    unreachable_since: datetime | None = None
    version: str | None = None
    nodes: int
    ready_nodes: int
    #: The zones its nodes are labelled with.
    zones: list[str]
    gpus: list[ClusterGpus]
    error: str | None = None
    #: Its warm stocks' available units per spec (`/v1/stocks` has their targets).
    warm: dict[str, int] = Field(default_factory=dict)


class Cluster(ApiModel):
    name: str
    region: str
    zones: list[str]
    #: The service's own cluster (its settings' kubeconfig): it cannot be deleted.
    home: bool
    state: ClusterState
    #: Live workloads placed in it (instances, jobs, inference services).
    workloads: int
    #: The last look at it; None until the first.
    health: ClusterHealth | None
    created_at: datetime


class Region(ApiModel):
    """Where a tenant may ask a workload to run: its clusters' zones and GPU types,
    as their last looks saw them (no cluster is named)."""

    name: str
    zones: list[str]
    gpu_types: list[str] = Field(alias="gpuTypes")
    #: Whether one of its clusters takes new workloads now.
    open: bool
