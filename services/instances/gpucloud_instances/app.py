"""Instances service: specs, stocks and the GPU instance lifecycle on Kubernetes."""

from __future__ import annotations

from gpucloud_libs.runtime import ServiceRuntime

from .api import router
from .kube import KubeClient
from .settings import InstancesSettings

settings = InstancesSettings()
runtime = ServiceRuntime(settings)
kube = KubeClient(settings.kubeconfig)


async def _kube_ready() -> None:
    await kube.server_version()


runtime.on_start(kube.connect)
runtime.on_stop(kube.close)
runtime.add_readiness_check("kubernetes", _kube_ready)

app = runtime.create_app(
    title="gpucloud instances",
    description="GPU instance specs, warm stocks and instance lifecycle on Kubernetes.",
    routers=[router],
)
