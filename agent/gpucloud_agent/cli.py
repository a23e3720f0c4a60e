"""The node agent's command line: reads GPUs (NVML, or the simulated fleet) and
publishes telemetry.

    python -m gpucloud_agent --node "$NODE_NAME"      # on a GPU node (DaemonSet)
    python -m gpucloud_agent --once                    # print what NVML returns, publish nothing
    python -m gpucloud_agent --check                   # is this host ready? (check.py)
    python -m gpucloud_agent --simulate --selector gpucloud.io/node-pool --control-port 8005

Every interval it publishes one `telemetry.batch.v1` per node (all its GPUs),
and a `node.inventory.v1` at start and every ten minutes (publisher.py). On a
machine without a driver or GPU it says so (logged, and published as the
inventory's `unavailableReason`), keeps running and tries NVML again now and
then, so a DaemonSet pod on a CPU node does not crash-loop.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any

import uvicorn
from faststream.kafka import KafkaBroker

from gpucloud_libs.identity import require_strong_key
from gpucloud_libs.kafka import create_broker
from gpucloud_libs.kube import KubeClient
from gpucloud_libs.logs import setup_logging
from gpucloud_libs.topics import TELEMETRY, require_topics

from .check import run_checks
from .fault_api import control_app
from .node_telemetry import NodeTelemetry
from .nvml import NvmlSource, NvmlUnavailable
from .publisher import publish_forever, sealed_publisher
from .seals import FetchedKeySealer, SecretSealer
from .settings import AgentSettings
from .simulated import SimulatedFleet
from .simulated_telemetry import SimulatedTelemetry


async def run_node(
    broker: KafkaBroker, kube: KubeClient | None, args: argparse.Namespace, settings: AgentSettings
) -> None:
    """A real node (`--node`): NVML, once it opens; each report under the node's seal."""
    sealer = FetchedKeySealer(args.node, settings.monitoring_url)
    publish = sealed_publisher(broker, sealer)
    telemetry = NodeTelemetry(args.node, kube)
    await telemetry.open(publish)
    try:
        await publish_forever(
            publish, telemetry, settings.telemetry_interval_s, cluster=settings.cluster_name
        )
    finally:
        telemetry.close()


async def run_simulated(
    broker: KafkaBroker, kube: KubeClient, args: argparse.Namespace, settings: AgentSettings
) -> None:
    """Telemetry for every node the `--selector` matches, load following their pods;
    with `--control-port`, the fault API; with `--standins`, a stand-in at each
    instance pod's ports (standin.py), once the simulated nodes are known."""
    telemetry = SimulatedTelemetry(SimulatedFleet(args.seed), kube, args.selector)
    async with contextlib.AsyncExitStack() as extras:
        if args.control_port:
            token = settings.simulator_token.get_secret_value()
            server = uvicorn.Server(uvicorn.Config(
                control_app(telemetry.fleet, token), host="127.0.0.1",
                port=args.control_port, log_config=None,
            ))  # fmt: skip
            await extras.enter_async_context(_running(server.serve()))
        if args.standins:
            # The stand-ins need the `standins` extra (asyncssh): a node's image has none.
            from .standin import Standins

            serving = Standins(kube, lambda node: node in telemetry.fleet.nodes)
            await extras.enter_async_context(_running(_after(telemetry.synced, serving.run)))
        sealer = SecretSealer(settings.telemetry_secret.get_secret_value())
        await publish_forever(
            sealed_publisher(broker, sealer), telemetry, settings.telemetry_interval_s,
            cluster=settings.cluster_name,
        )  # fmt: skip


@contextlib.asynccontextmanager
async def _running(work: Coroutine[Any, Any, object]) -> AsyncIterator[None]:
    """`work` as a task for the block's length."""
    task = asyncio.create_task(work)
    try:
        yield
    finally:
        task.cancel()


async def _after(event: asyncio.Event, start: Callable[[], Awaitable[object]]) -> None:
    await event.wait()
    await start()


def print_once() -> int:
    """Open NVML, print the inventory and three samples as JSON; 0 with GPUs, 3 without."""
    source = NvmlSource()
    try:
        source.open()
    except NvmlUnavailable as error:
        print(json.dumps({"nvml": "unavailable", "reason": str(error)}))
        return 3
    try:
        samples = []
        for round_ in range(3):
            if round_:
                time.sleep(1)
            samples.append([sample.model_dump(mode="json") for sample in source.sample()])
        inventory = [gpu.model_dump(mode="json") for gpu in source.inventory()]
        print(json.dumps({"inventory": inventory, "samples": samples}, indent=2))
        return 0
    finally:
        source.close()


async def _main(args: argparse.Namespace) -> None:
    settings = AgentSettings()
    setup_logging("agent", settings.log_level)
    if args.simulate and args.control_port:
        require_strong_key(
            settings.simulator_token.get_secret_value(), setting="GPUCLOUD_SIMULATOR_TOKEN"
        )
    if args.simulate:
        require_strong_key(
            settings.telemetry_secret.get_secret_value(), setting="GPUCLOUD_TELEMETRY_SECRET"
        )
    elif not settings.monitoring_url:
        raise SystemExit("GPUCLOUD_MONITORING_URL is not set: the agent gets its node's key there")
    await require_topics(settings.kafka, [TELEMETRY])
    broker = create_broker(settings.kafka, client_id="gpucloud-agent")
    await broker.start()
    kube: KubeClient | None = None
    if args.simulate or settings.kubeconfig or os.environ.get("KUBERNETES_SERVICE_HOST"):
        kube = KubeClient(settings.kubeconfig)
        await kube.connect()
    try:
        if args.simulate:
            assert kube is not None
            await run_simulated(broker, kube, args, settings)
        else:
            await run_node(broker, kube, args, settings)
    finally:
        if kube is not None:
            await kube.close()
        await broker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m gpucloud_agent", description=__doc__)
    parser.add_argument("--node", default=os.environ.get("NODE_NAME", socket.gethostname()))
    parser.add_argument("--once", action="store_true", help="print NVML's answers and exit")
    parser.add_argument(
        "--check",
        action="store_true",
        help="check this host is ready for the agent (driver, GPUs, sample cost, Kafka) and exit",
    )
    parser.add_argument("--simulate", action="store_true", help="simulate the kwok fleet's GPUs")
    parser.add_argument("--selector", default="gpucloud.io/node-pool", help="nodes to simulate")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--control-port", type=int, help="serve the fault-injection API here")
    parser.add_argument(
        "--standins",
        action="store_true",
        help="with --simulate: serve a stand-in at each instance pod's ports (standin.py)",
    )
    args = parser.parse_args()
    if args.once:
        sys.exit(print_once())
    if args.check:
        sys.exit(run_checks(AgentSettings().kafka))
    asyncio.run(_main(args))
