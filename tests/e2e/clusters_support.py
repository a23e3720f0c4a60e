"""The local stack's clusters as the tests reach them."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config

from .conftest import stack_service_env

HOME = "local-1"
#: The stack's second cluster, registered by `up` (deploy/local/fleet-local-2.toml).
SECOND = "local-2"


def kubeconfig_of(service: str | None, *, server: str | None = None) -> str:
    """The local stack's kubeconfig of `service` (None: the operator's own), its API
    server written as `server` where given (the same cluster by another address)."""
    path = stack_service_env(service or "instances")["GPUCLOUD_KUBECONFIG"]
    if service is None:
        path = str(Path(path).with_name("kubeconfig"))
    config: dict[str, Any] = yaml.safe_load(Path(path).read_text())
    if server is not None:
        for cluster in config["clusters"]:
            cluster["cluster"]["server"] = server
    return yaml.safe_dump(config)


def second_cluster_kubeconfig() -> str:
    """The instances service's kubeconfig for the second cluster, as `up` registers it."""
    path = Path(stack_service_env("instances")["GPUCLOUD_KUBECONFIG"])
    return path.with_name("kubeconfig-instances-local-2").read_text()


def second_cluster_storage_kubeconfig() -> str:
    """The storage service's kubeconfig for the second cluster, as `up` gives it."""
    path = Path(stack_service_env("instances")["GPUCLOUD_KUBECONFIG"])
    return path.with_name("kubeconfig-storage-local-2").read_text()


#: How `up` registers the second cluster (POST /v1/clusters, less the kubeconfig).
SECOND_REGISTRATION = {"name": SECOND, "region": "local-2", "zones": ["zone-c"]}


@contextlib.asynccontextmanager
async def second_cluster_api(*, as_operator: bool = False) -> AsyncIterator[k8s.ApiClient]:
    """The second cluster's API, as the instances service reaches it, or as the
    operator does (who may read Secrets, which no service of the platform may)."""
    if as_operator:
        path = Path(stack_service_env("instances")["GPUCLOUD_KUBECONFIG"])
        text = path.with_name(f"kubeconfig-{SECOND}").read_text()
    else:
        text = second_cluster_kubeconfig()
    configuration = k8s.Configuration()
    await k8s_config.load_kube_config_from_dict(
        yaml.safe_load(text), client_configuration=configuration
    )
    api = k8s.ApiClient(configuration)
    try:
        yield api
    finally:
        await api.close()
