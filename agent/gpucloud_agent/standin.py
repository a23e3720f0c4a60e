"""The simulated node's stand-in for the containers kwok does not run.

kwok marks a pod Running but starts nothing, so an instance's URL on the local stack
would lead nowhere. Where the simulator runs with `--standins`, each running
instance pod on a simulated node gets, at its own loopback address and on each TCP
port it declares, a small page saying what would run there: image, command, ports
and GPUs; an SSH port gets an SSH server that lets in the pod's PUBLIC_KEY
(standin_ssh.py). It is labelled for what it is, as the simulated GPUs are: a stand-in,
not the workload. Pods follow a watch, so a page is up within moments of the pod
running, and goes when the pod does.
"""

from __future__ import annotations

import asyncio
import html
import ipaddress
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from gpucloud_libs.errors import DependencyUnavailable
from gpucloud_libs.kube import GoneError, KubeClient, Manifest
from gpucloud_libs.naming import INSTANCE_LABEL, TENANT_LABEL

from . import standin_ssh

log = logging.getLogger(__name__)

#: How long to wait before watching again after the API server broke a watch.
WATCH_RETRY_S = 1.0

Address = tuple[str, int]


def served_ports(pod: Manifest) -> list[Address]:
    """(pod IP, port) of each TCP port of a running pod's first container; none for a
    pod not running, without an address, or off loopback (nothing is served there)."""
    status, spec = pod.get("status", {}), pod.get("spec", {})
    address = status.get("podIP")
    if status.get("phase") != "Running" or not address:
        return []
    if not ipaddress.ip_address(address).is_loopback:
        return []
    container = (spec.get("containers") or [{}])[0]
    return [
        (address, int(port["containerPort"]))
        for port in container.get("ports") or []
        if port.get("protocol", "TCP") == "TCP"
    ]


def page(pod: Manifest) -> str:
    """What would run in the pod, as a page; every value from the pod is escaped."""
    metadata, spec = pod.get("metadata", {}), pod.get("spec", {})
    container = (spec.get("containers") or [{}])[0]
    labels = metadata.get("labels", {})
    limits = container.get("resources", {}).get("limits", {})
    gpus = ", ".join(f"{count} x {name}" for name, count in limits.items() if "nvidia" in name)
    ports = ", ".join(str(port["containerPort"]) for port in container.get("ports") or [])
    rows = {
        "Instance": labels.get(INSTANCE_LABEL, ""),
        "Tenant": labels.get(TENANT_LABEL, ""),
        "Image": container.get("image", ""),
        "Command": " ".join(container.get("command") or []) or "(the image's own)",
        "Arguments": " ".join(container.get("args") or []) or "(none)",
        "Ports": ports or "(none)",
        "GPUs": gpus or "(none)",
        "Node": spec.get("nodeName", ""),
    }
    cells = "".join(
        f"<tr><th>{html.escape(name)}</th><td><code>{html.escape(str(value))}</code></td></tr>"
        for name, value in rows.items()
    )
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        "<title>Simulated workload</title></head><body style='font-family:sans-serif'>"
        "<h1>Simulated workload</h1>"
        "<p><strong>This page stands in for the container.</strong> The local stack's "
        "GPU nodes are simulated (kwok): nothing runs inside this pod, so the simulated "
        "node serves this page at the pod's address instead. On a real cluster this URL "
        "reaches the workload itself.</p>"
        f"<table>{cells}</table></body></html>"
    )


async def serve_page(
    address: Address, pod_of: Callable[[], Manifest | None]
) -> Callable[[], Awaitable[None]]:
    """Serve the pod's page at `address`; returns how to stop it. Raises OSError when the
    address cannot be bound."""

    async def answer(_: web.Request) -> web.Response:
        return web.Response(text=page(pod_of() or {}), content_type="text/html")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, *address).start()
    except OSError:
        await runner.cleanup()
        raise
    return runner.cleanup


class Standins:
    """One small server per (pod address, port) of the simulated nodes' instance pods."""

    def __init__(self, kube: KubeClient, simulated: Callable[[str], bool]) -> None:
        self._kube = kube
        self._simulated = simulated
        #: The pod each address serves, and how to stop its server.
        self._pods: dict[Address, Manifest] = {}
        self._servers: dict[Address, Callable[[], Awaitable[None]]] = {}

    async def run(self) -> None:
        """List, then watch the instance pods, until cancelled."""
        try:
            while True:
                try:
                    pods, version = await self._kube.list("Pod", label_selector=INSTANCE_LABEL)
                    await self._replace(pods)
                    async for event_type, pod in self._kube.watch(
                        "Pod", resource_version=version, label_selector=INSTANCE_LABEL
                    ):
                        if event_type != "BOOKMARK":
                            await self._follow(pod, gone=event_type == "DELETED")
                except (GoneError, DependencyUnavailable) as error:
                    log.info("pod watch ended; relisting", extra={"error": str(error)})
                    await asyncio.sleep(WATCH_RETRY_S)
                except Exception:
                    # The pages are a convenience of the local stack: an error here
                    # is logged and the watch starts over, never the simulator's end.
                    log.exception("stand-ins failed; relisting")
                    await asyncio.sleep(WATCH_RETRY_S)
        finally:
            await self.close()

    async def close(self) -> None:
        for address in list(self._servers):
            await self._stop(address)

    def serving(self) -> list[Address]:
        return sorted(self._servers)

    async def _replace(self, pods: list[Manifest]) -> None:
        names = {_name(pod) for pod in pods}
        for address, pod in list(self._pods.items()):
            if _name(pod) not in names:
                await self._stop(address)
        for pod in pods:
            await self._follow(pod, gone=False)

    async def _follow(self, pod: Manifest, *, gone: bool) -> None:
        node = pod.get("spec", {}).get("nodeName")
        wanted = set() if gone or not node or not self._simulated(node) else set(served_ports(pod))
        for address, served in list(self._pods.items()):
            if _name(served) == _name(pod) and address not in wanted:
                await self._stop(address)
        for address in wanted:
            self._pods[address] = pod  # the page shows the pod as it is now
            if address not in self._servers:
                await self._start(address)

    async def _start(self, address: Address) -> None:
        serve = standin_ssh.serve if address[1] in standin_ssh.SSH_PORTS else serve_page
        try:
            self._servers[address] = await serve(address, lambda: self._pods.get(address))
        except OSError as error:  # a port below 1024 without the right, or one in use
            self._pods.pop(address, None)
            log.warning("stand-in not served", extra={"address": address, "error": str(error)})

    async def _stop(self, address: Address) -> None:
        self._pods.pop(address, None)
        stop = self._servers.pop(address, None)
        if stop is not None:
            await stop()


def _name(pod: Manifest) -> tuple[Any, Any]:
    metadata = pod.get("metadata", {})
    return metadata.get("namespace"), metadata.get("name")
