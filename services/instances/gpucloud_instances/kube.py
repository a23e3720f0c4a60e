"""The one boundary to Kubernetes: only this module imports kubernetes_asyncio.

It raises the project's own errors, so callers never handle library types.
"""

from __future__ import annotations

from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from gpucloud_libs.errors import DependencyUnavailable


class KubeError(Exception):
    """A Kubernetes API call failed; `status` is the HTTP status when there was one."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class KubeClient:
    """Connects on service start (kubeconfig path, or in-cluster when none is given)."""

    def __init__(self, kubeconfig: str | None) -> None:
        self._kubeconfig = kubeconfig
        self._api: client.ApiClient | None = None

    async def connect(self) -> None:
        configuration = client.Configuration()
        if self._kubeconfig:
            await config.load_kube_config(
                config_file=self._kubeconfig, client_configuration=configuration
            )
        else:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        self._api = client.ApiClient(configuration)

    @property
    def api(self) -> client.ApiClient:
        if self._api is None:
            raise DependencyUnavailable("Kubernetes client is not connected yet")
        return self._api

    async def server_version(self) -> str:
        try:
            info = await client.VersionApi(self.api).get_code(_request_timeout=3)
        except ApiException as error:
            raise KubeError(f"version request failed: {error.reason}", error.status) from error
        except OSError as error:
            raise DependencyUnavailable(f"Kubernetes API unreachable: {error}") from error
        return str(info.git_version)

    async def close(self) -> None:
        if self._api is not None:
            await self._api.close()
