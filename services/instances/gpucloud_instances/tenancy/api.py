"""HTTP route of a user's kubectl credential for their tenant's namespace."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, status

from gpucloud_libs.http import CurrentIdentity, app_part

from .kubeconfigs import IssuedKubeconfig, KubeconfigRequest, UserKubeconfigs

router = APIRouter()

KubeconfigsPart = Annotated[UserKubeconfigs, app_part(UserKubeconfigs)]


@router.post(
    "/kubeconfig",
    tags=["kubectl"],
    status_code=status.HTTP_201_CREATED,
    summary="A short-lived kubectl credential for your tenant's namespace: read pods and "
    "events, logs, exec and port-forward; no pod creation. It ends when you lose access",
)
async def issue_kubeconfig(
    body: KubeconfigRequest, identity: CurrentIdentity, kubeconfigs: KubeconfigsPart
) -> IssuedKubeconfig:
    identity.require_role("tenant-user", "tenant-admin")
    return await kubeconfigs.issue(identity, body)
