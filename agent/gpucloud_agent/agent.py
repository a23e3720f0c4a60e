"""The node agent: reads GPUs (NVML, or the simulated fleet) and publishes telemetry.

    python -m gpucloud_agent --node "$NODE_NAME"      # on a GPU node (DaemonSet)
    python -m gpucloud_agent --once                    # print what NVML returns, publish nothing
    python -m gpucloud_agent --check                   # is this host ready? (check.py)
    python -m gpucloud_agent --simulate --selector gpucloud.io/node-pool --control-port 8005

Every interval it publishes one `telemetry.batch.v1` per node (all its GPUs),
and a `node.inventory.v1` at start and every ten minutes. On a machine without
a driver or GPU it says so (logged, and published as the inventory's
`unavailableReason`), keeps running and tries NVML again now and then, so a
DaemonSet pod on a CPU node does not crash-loop.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import socket
import sys
import time
from datetime import UTC, datetime
from typing import Annotated

import uvicorn
from fastapi import Depends, FastAPI, Header
from faststream.kafka import KafkaBroker
from pydantic import Field, SecretStr

from gpucloud_libs.errors import NotFound, Unauthenticated
from gpucloud_libs.events import NodeInventory, TelemetryBatch
from gpucloud_libs.gpu_shares import gpu_units
from gpucloud_libs.http import ApiModel, install_error_handlers
from gpucloud_libs.identity import require_strong_key, secrets_equal
from gpucloud_libs.kafka import create_broker, publish_event
from gpucloud_libs.kube import KubeClient
from gpucloud_libs.logs import setup_logging
from gpucloud_libs.naming import GPU_PRODUCT_LABEL, GPU_RESOURCE, TENANT_LABEL, workload_of
from gpucloud_libs.settings import ServiceSettings
from gpucloud_libs.topics import TELEMETRY, require_topics

from .check import run_checks
from .nvml import NvmlSource, NvmlUnavailable, pod_uid_of
from .simulated import Fault, Placement, SimulatedFleet, slice_layout
from .standin import Standins

log = logging.getLogger("gpucloud.agent")
#: GPU feature discovery's count of a node's physical GPUs.
GPU_COUNT_LABEL = "nvidia.com/gpu.count"
SOURCE = "/gpucloud/agent"
INVENTORY_EVERY_S = 600.0
#: The simulator re-reads nodes and instance pods this often: listing every pod
#: each second would load the API server more than the telemetry does.
SYNC_EVERY_S = 10.0
NVML_RETRY_S = 300.0


class AgentSettings(ServiceSettings):
    service_name: str = "agent"
    kubeconfig: str | None = None
    telemetry_interval_s: float = 1.0
    #: The simulator's fault API takes this bearer token (required with --control-port).
    simulator_token: SecretStr = SecretStr("")


def _now() -> datetime:
    return datetime.now(UTC)


async def _publish(broker: KafkaBroker, data: TelemetryBatch | NodeInventory) -> None:
    await publish_event(broker, TELEMETRY, data, source=SOURCE)


async def _workloads_by_pod(kube: KubeClient | None, node: str) -> dict[str, tuple[str, str]]:
    """Pod UID -> (tenant, workload) of the platform's pods on this node: instances,
    batch jobs' runs and inference services' replicas alike."""
    if kube is None:
        return {}
    pods, _ = await kube.list(
        "Pod", label_selector=TENANT_LABEL, field_selector=f"spec.nodeName={node}"
    )
    return {
        pod["metadata"]["uid"]: workload
        for pod in pods
        if (workload := workload_of(pod["metadata"].get("labels", {}))) is not None
    }


async def run_nvml(
    broker: KafkaBroker, node: str, interval_s: float, kube: KubeClient | None
) -> None:
    source = NvmlSource()
    while True:
        try:
            source.open()
            break
        except NvmlUnavailable as error:
            log.warning(
                "no GPU telemetry from this node: %s; retrying in %.0f s", error, NVML_RETRY_S,
                extra={"node": node},
            )  # fmt: skip
            await _publish(
                broker,
                NodeInventory(node=node, source="nvml", unavailable_reason=str(error), at=_now()),
            )
            await asyncio.sleep(NVML_RETRY_S)
    log.info("NVML open", extra={"node": node, "gpus": len(source.inventory())})
    inventory_due = 0.0
    loop = asyncio.get_running_loop()
    try:
        while True:
            started = loop.time()
            if started >= inventory_due:
                await _publish(
                    broker,
                    NodeInventory(
                        node=node, source="nvml", gpus=tuple(source.inventory()), at=_now()
                    ),
                )
                inventory_due = started + INVENTORY_EVERY_S
            samples = await asyncio.to_thread(source.sample)
            owners = await _attribution(source, kube, node)
            samples = [
                sample.model_copy(
                    update=dict(
                        zip(("tenant_id", "instance_id"), owners[sample.gpu_uuid], strict=True)
                    )
                )
                if sample.gpu_uuid in owners
                else sample
                for sample in samples
            ]
            await _publish(broker, TelemetryBatch(node=node, source="nvml", samples=tuple(samples)))
            await asyncio.sleep(max(0.0, interval_s - (loop.time() - started)))
    finally:
        source.close()


async def _attribution(
    source: NvmlSource, kube: KubeClient | None, node: str
) -> dict[str, tuple[str, str]]:
    """GPU UUID -> (tenant, instance), where a GPU's processes run in an instance's pod."""
    if kube is None:
        return {}
    try:
        by_pod = await _workloads_by_pod(kube, node)
    except Exception as error:  # attribution is best effort; telemetry goes on
        log.warning("cannot list this node's pods: %s", error)
        return {}
    owners: dict[str, tuple[str, str]] = {}
    for uuid, pids in (await asyncio.to_thread(source.processes)).items():
        for pid in pids:
            uid = pod_uid_of(pid)
            if uid in by_pod:
                owners[uuid] = by_pod[uid]
                break
    return owners


class FaultRequest(ApiModel):
    node: str
    gpu: int = Field(ge=0)
    fault: Fault


def control_app(fleet: SimulatedFleet, token: str) -> FastAPI:
    """The simulator's own small API: inject and clear faults (demo, tests, chaos drills).
    A fault looks like a broken GPU to the whole platform (alerts, quarantine, refunds),
    so changing one takes the operator's `GPUCLOUD_SIMULATOR_TOKEN` as a bearer token."""
    app = FastAPI(title="gpucloud GPU simulator")

    def operator(authorization: Annotated[str, Header()] = "") -> None:
        scheme, _, presented = authorization.partition(" ")
        if scheme.lower() != "bearer" or not secrets_equal(presented, token):
            raise Unauthenticated("send the simulator token as `Authorization: Bearer <token>`")

    @app.get("/healthz")
    async def healthz() -> dict[str, object]:
        return {"status": "ok", "nodes": len(fleet.nodes)}

    @app.post("/faults", status_code=204, dependencies=[Depends(operator)])
    async def inject(body: FaultRequest) -> None:
        if body.node not in fleet.nodes or body.gpu >= fleet.nodes[body.node].gpu_count:
            raise NotFound(f"no simulated GPU {body.gpu} on node {body.node!r}")
        fleet.inject(body.node, body.gpu, body.fault)

    @app.delete("/faults/{node}", status_code=204, dependencies=[Depends(operator)])
    async def clear(node: str) -> None:
        fleet.clear(node)

    install_error_handlers(app)
    return app


async def run_simulated(
    broker: KafkaBroker,
    kube: KubeClient,
    selector: str,
    interval_s: float,
    seed: int,
    control_port: int | None = None,
    fleet: SimulatedFleet | None = None,
    control_token: str = "",
    standins: bool = False,
) -> None:
    """Telemetry for every node matching `selector`, load following their instances;
    with `standins`, a page at each instance pod's ports (standin.py)."""
    fleet = fleet or SimulatedFleet(seed)
    control: asyncio.Task[None] | None = None
    if control_port:
        server = uvicorn.Server(
            uvicorn.Config(
                control_app(fleet, control_token),
                host="127.0.0.1",
                port=control_port,
                log_config=None,
            )
        )
        control = asyncio.create_task(server.serve())
    serving = Standins(kube, lambda node: node in fleet.nodes) if standins else None
    try:
        await _simulate(broker, kube, fleet, selector, interval_s, serving)
    finally:
        if control is not None:
            control.cancel()


async def _simulate(
    broker: KafkaBroker,
    kube: KubeClient,
    fleet: SimulatedFleet,
    selector: str,
    interval_s: float,
    standins: Standins | None = None,
) -> None:
    loop = asyncio.get_running_loop()
    inventory_due = sync_due = 0.0
    serving: asyncio.Task[None] | None = None
    try:
        while True:
            started = loop.time()
            if started >= sync_due:
                added = await sync_fleet(fleet, kube, selector)
                sync_due = started + SYNC_EVERY_S
                if standins is not None and serving is None:
                    # Once the simulated nodes are known: a pod is served only on one.
                    serving = asyncio.create_task(standins.run())
            else:
                added = []
            inventory_due = await _tick(broker, fleet, started, inventory_due, added)
            await asyncio.sleep(max(0.0, interval_s - (loop.time() - started)))
    finally:
        if serving is not None:
            serving.cancel()


async def _tick(
    broker: KafkaBroker,
    fleet: SimulatedFleet,
    started: float,
    inventory_due: float,
    added: list[str],
) -> float:
    """One round: inventories of new nodes (of all, when due) and every node's samples.
    Returns when the next full inventory is due."""
    if started >= inventory_due:
        added, inventory_due = list(fleet.nodes), started + INVENTORY_EVERY_S
    if added:
        log.info("simulating nodes", extra={"nodes": len(fleet.nodes), "new": len(added)})
    for name in added:
        inventory = NodeInventory(
            node=name, source="simulated", gpus=tuple(fleet.inventory(name)), at=_now()
        )
        await _publish(broker, inventory)
    at = _now()
    for name in fleet.nodes:
        batch = TelemetryBatch(node=name, source="simulated", samples=tuple(fleet.sample(name, at)))
        await _publish(broker, batch)
    return inventory_due


async def sync_fleet(fleet: SimulatedFleet, kube: KubeClient, selector: str) -> list[str]:
    """Bring the simulated nodes and their instances in line with the cluster; returns
    the nodes that are new (their inventory is due)."""
    nodes, _ = await kube.list("Node", label_selector=selector)
    pods, _ = await kube.list("Pod", label_selector=TENANT_LABEL)
    seen, added = set(), []
    for node in nodes:
        name, labels = node["metadata"]["name"], node["metadata"].get("labels", {})
        units = gpu_units(node.get("status", {}).get("capacity", {}))
        # A node whose GPUs are all shared out advertises no whole ones; GPU feature
        # discovery's count label still says how many there are.
        gpus = units.pop(GPU_RESOURCE, 0) or int(labels.get(GPU_COUNT_LABEL, "0"))
        shared = {resource: count for resource, count in units.items() if count}
        if gpus == 0:
            continue
        seen.add(name)
        if name not in fleet.nodes:
            added.append(name)
        fleet.set_node(
            name, labels.get(GPU_PRODUCT_LABEL, "unknown"), gpus, slice_layout(gpus, shared)
        )
    placed: dict[str, list[tuple[str, Placement]]] = {}
    for pod in pods:
        node_name = pod.get("spec", {}).get("nodeName")
        workload = workload_of(pod["metadata"].get("labels", {}))
        if (
            node_name in seen
            and workload is not None
            and pod.get("status", {}).get("phase") == "Running"
        ):
            tenant, workload_id = workload
            limits = pod["spec"]["containers"][0].get("resources", {}).get("limits", {})
            for resource, count in gpu_units(limits).items():
                placed.setdefault(node_name, []).append((
                    pod["metadata"].get("creationTimestamp", ""),
                    Placement(tenant, workload_id, count, resource),
                ))  # fmt: skip
    for name in list(fleet.nodes):
        if name not in seen:
            fleet.remove_node(name)
            continue
        ordered = sorted(placed.get(name, []), key=lambda item: (item[0], item[1].instance_id))
        fleet.place(name, [placement for _, placement in ordered])
    return added


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
            await run_simulated(
                broker,
                kube,
                args.selector,
                settings.telemetry_interval_s,
                args.seed,
                control_port=args.control_port,
                control_token=settings.simulator_token.get_secret_value(),
                standins=args.standins,
            )
        else:
            await run_nvml(broker, args.node, settings.telemetry_interval_s, kube)
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
        help="with --simulate: serve a stand-in page at each instance pod's ports (standin.py)",
    )
    args = parser.parse_args()
    if args.once:
        sys.exit(print_once())
    if args.check:
        sys.exit(run_checks(AgentSettings().kafka))
    asyncio.run(_main(args))
