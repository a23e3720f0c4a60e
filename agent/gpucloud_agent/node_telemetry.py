"""A real GPU node's telemetry: NVML's samples, each GPU attributed to the workload
whose processes use it (the platform's pods on this node, by their cgroup's pod UID)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from gpucloud_libs.events import NodeInventory, TelemetryBatch
from gpucloud_libs.kube import KubeClient
from gpucloud_libs.naming import TENANT_LABEL, workload_of

from .nvml import NvmlSource, NvmlUnavailable, pod_uid_of

log = logging.getLogger("gpucloud.agent")

#: How long to wait before trying NVML again on a node where it is not usable.
NVML_RETRY_S = 300.0


class NodeTelemetry:
    """The TelemetrySource of one node with NVML."""

    def __init__(self, node: str, kube: KubeClient | None) -> None:
        self.node = node
        self._kube = kube
        self._nvml = NvmlSource()
        self._announced = False

    async def open(self, report: Callable[[NodeInventory], Awaitable[object]]) -> None:
        """Open NVML, trying again every NVML_RETRY_S while there is none: a DaemonSet pod
        on a node without a driver or GPU says why (`report`, an inventory with its
        `unavailableReason`) and waits rather than crash-looping."""
        while True:
            try:
                self._nvml.open()
                break
            except NvmlUnavailable as error:
                log.warning(
                    "no GPU telemetry from this node: %s; retrying in %.0f s", error,
                    NVML_RETRY_S, extra={"node": self.node},
                )  # fmt: skip
                await report(
                    NodeInventory(
                        node=self.node, source="nvml", unavailable_reason=str(error), at=_now()
                    )
                )
                await asyncio.sleep(NVML_RETRY_S)
        log.info("NVML open", extra={"node": self.node, "gpus": len(self._nvml.inventory())})

    def close(self) -> None:
        self._nvml.close()

    async def nodes_added(self) -> list[str]:
        announced, self._announced = self._announced, True
        return [] if announced else [self.node]

    def nodes(self) -> list[str]:
        return [self.node]

    def inventory(self, node: str) -> NodeInventory:
        return NodeInventory(
            node=node, source="nvml", gpus=tuple(self._nvml.inventory()), at=_now()
        )

    async def batches(self) -> list[TelemetryBatch]:
        samples = await asyncio.to_thread(self._nvml.sample)
        owners = await self._attribution()
        attributed = tuple(
            sample.model_copy(
                update=dict(zip(("tenant_id", "instance_id"), owners[sample.gpu_uuid], strict=True))
            )
            if sample.gpu_uuid in owners
            else sample
            for sample in samples
        )
        return [TelemetryBatch(node=self.node, source="nvml", samples=attributed)]

    async def _attribution(self) -> dict[str, tuple[str, str]]:
        """GPU UUID -> (tenant, workload), where a GPU's processes run in its pod."""
        if self._kube is None:
            return {}
        try:
            by_pod = await workloads_by_pod(self._kube, self.node)
        except Exception as error:  # attribution is best effort; telemetry goes on
            log.warning("cannot list this node's pods: %s", error)
            return {}
        owners: dict[str, tuple[str, str]] = {}
        for uuid, pids in (await asyncio.to_thread(self._nvml.processes)).items():
            for pid in pids:
                uid = pod_uid_of(pid)
                if uid in by_pod:
                    owners[uuid] = by_pod[uid]
                    break
        return owners


async def workloads_by_pod(kube: KubeClient, node: str) -> dict[str, tuple[str, str]]:
    """Pod UID -> (tenant, workload) of the platform's pods on this node: instances,
    batch jobs' runs and inference services' replicas alike."""
    pods, _ = await kube.list(
        "Pod", label_selector=TENANT_LABEL, field_selector=f"spec.nodeName={node}"
    )
    return {
        pod["metadata"]["uid"]: workload
        for pod in pods
        if (workload := workload_of(pod["metadata"].get("labels", {}))) is not None
    }


def _now() -> datetime:
    return datetime.now(UTC)
