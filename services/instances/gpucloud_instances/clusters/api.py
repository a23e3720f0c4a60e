"""HTTP routes of the clusters (platform admin)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import APIRouter, Response, status

from gpucloud_libs.http import CurrentIdentity, app_part

from .schemas import Cluster, ClusterCreate, ClusterState, Region
from .service import Clusters

router = APIRouter()

ClustersPart = Annotated[Clusters, app_part(Clusters)]


@router.post(
    "/clusters",
    status_code=status.HTTP_201_CREATED,
    tags=["clusters"],
    summary="Register a Kubernetes cluster to place workloads in (platform admin)",
)
async def register_cluster(
    body: ClusterCreate, identity: CurrentIdentity, clusters: ClustersPart
) -> Cluster:
    return await clusters.register(identity, body)


@router.get(
    "/clusters",
    tags=["clusters"],
    summary="The clusters, with their state, health and GPUs (platform admin)",
)
async def list_clusters(identity: CurrentIdentity, clusters: ClustersPart) -> list[Cluster]:
    return await clusters.list(identity)


@router.get(
    "/regions",
    tags=["clusters"],
    summary="The regions workloads may be placed in, with their zones and GPU types",
)
async def list_regions(_: CurrentIdentity, clusters: ClustersPart) -> list[Region]:
    return await clusters.regions()


@router.get("/clusters/{name}", tags=["clusters"], summary="One cluster (platform admin)")
async def get_cluster(name: str, identity: CurrentIdentity, clusters: ClustersPart) -> Cluster:
    return await clusters.get(identity, name)


def _set_state(state: ClusterState) -> Callable[..., Awaitable[Cluster]]:
    async def set_state(name: str, identity: CurrentIdentity, clusters: ClustersPart) -> Cluster:
        return await clusters.set_state(identity, name, state)

    return set_state


for _verb, _state, _summary in (
    ("cordon", ClusterState.CORDONED,
     "Place no new workloads in the cluster; those in it go on (platform admin)"),
    ("drain", ClusterState.DRAINING,
     "Place no new workloads in the cluster, before deleting it (platform admin)"),
    ("uncordon", ClusterState.ACTIVE,
     "Place new workloads in the cluster again (platform admin)"),
):  # fmt: skip
    router.add_api_route(
        f"/clusters/{{name}}/{_verb}", _set_state(_state), methods=["POST"], tags=["clusters"],
        summary=_summary, name=f"{_verb}_cluster",
    )  # fmt: skip


@router.delete(
    "/clusters/{name}",
    status_code=status.HTTP_204_NO_CONTENT,
    tags=["clusters"],
    summary="Forget a cluster that runs no workload (platform admin)",
)
async def delete_cluster(name: str, identity: CurrentIdentity, clusters: ClustersPart) -> Response:
    await clusters.delete(identity, name)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
