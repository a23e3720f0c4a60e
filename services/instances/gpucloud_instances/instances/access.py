"""Reaching a caller's instance: its log, and where the gateway dials one of its ports."""

from __future__ import annotations

from collections.abc import AsyncIterator

from gpucloud_libs.errors import Conflict, NotFound
from gpucloud_libs.identity import Identity

from ..lifecycle import LIVE, TERMINAL, State
from ..log_streams import LogStreams
from ..schemas import STORED, InstanceTemplate
from . import manifests as instance_manifests
from .schemas import InstanceEndpoint
from .store import InstanceStore


class InstanceNotRunning(Conflict):
    code = "instance_not_running"
    title = "The instance is not running"


class InstanceAccess:
    def __init__(self, instances: InstanceStore, logs: LogStreams) -> None:
        self._instances = instances
        self._logs = logs

    async def logs(
        self, identity: Identity, instance_id: str, *, follow: bool, tail_lines: int | None
    ) -> AsyncIterator[bytes]:
        """The instance's log as the kubelet serves it; with `follow`, as it grows, until
        the instance ends. Errors come before the first byte, so they answer as problems."""
        doc = await self._instances.owned(identity, instance_id)
        if State(doc["state"]) in TERMINAL or doc.get("node") is None:
            raise InstanceNotRunning(
                f"instance {instance_id!r} is {doc['state']}: its log is kept only while its "
                "pod runs",
                state=doc["state"],
            )

        async def ended() -> bool:
            now = await self._instances.current(doc["_id"])
            return now is None or State(now["state"]) in TERMINAL

        return await self._logs.open(
            doc["tenant_id"], doc["namespace"], instance_manifests.pod_name(doc["instance_id"]),
            cluster=doc.get("cluster"), follow=follow, tail_lines=tail_lines,
            gone=f"instance {instance_id!r} has no pod now", ended=ended,
        )  # fmt: skip

    async def endpoint(
        self, identity: Identity, instance_id: str, port: int, *, tunnel: bool = False
    ) -> InstanceEndpoint:
        """Where the gateway reaches one port of the caller's instance: a public one for
        its URL, any declared TCP port for a tunnel (`gpucloud ssh`)."""
        doc = await self._instances.owned(identity, instance_id)
        template = InstanceTemplate.model_validate(doc["template"], context=STORED)
        if not any(
            p.port == port and (p.is_public or tunnel) and p.protocol == "TCP"
            for p in template.ports
        ):
            kind = "TCP" if tunnel else "public"
            raise NotFound(f"instance {instance_id!r} has no {kind} port {port}")
        state = State(doc["state"])
        if state != State.RUNNING or not doc.get("pod_ip"):
            starting = state in LIVE and state != State.STOPPING
            raise InstanceNotRunning(
                f"instance {instance_id!r} is {state.value}"
                + ("; it will answer once it is running" if starting else ""),
                state=state.value,
                **({"retry_after_s": 2} if starting else {}),
            )
        return InstanceEndpoint(instance_id=instance_id, port=port, address=doc["pod_ip"])
