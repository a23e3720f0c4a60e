"""The admission queue at scale: one-GPU jobs on kwok nodes, submission to all running,
through the API against the same jobs as bare Kubernetes Jobs.

Side by side in one run, on the same cluster and the same fake GPU nodes:
  bare   create the batch/v1 Jobs directly with kubernetes-asyncio (the very pod
         template gpucloud makes, without its labels), until a pod watch has seen
         every pod Running
  api    POST /jobs (to the instances service, signed as the gateway signs), until
         the same kind of watch has seen every pod Running; then each job's queue
         decision latency (submitted to admitted, from its history) and the
         instances service's peak memory
The jobs run for an hour on kwok, so "all running" is the figure; each path's jobs
go (namespace deleted, tenant deleted) before the next path runs.

Defaults: 10,000 jobs on 1,000 nodes of 10 GPUs. Published anchors for context:
KAI-Scheduler admits 4,000 jobs on 500 kwok nodes in 6 min 37 s (about 10/s);
Kueue's performance test admits about 43 workloads/s.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

import httpx
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import watch

from gpucloud_instances import manifests
from gpucloud_instances.jobs import manifests as job_manifests
from gpucloud_instances.jobs.schemas import JobCreate
from gpucloud_libs.events import TenantDeleted
from gpucloud_libs.kafka import create_broker, publish_event
from gpucloud_libs.kafka_connection import KafkaConnection
from gpucloud_libs.topics import TENANTS
from gpucloud_stack import layout

from .common import kube_client, percentile, stack_env
from .instance_start import Bench

PRODUCT = "QUEUE-BENCH-GPU"
SPEC = "queue-bench-1gpu"
BARE_LABEL = "gpucloud.io/bench-queue"
#: Long enough that no run ends while the path is measured.
RUN_FOR = "3600s"


def job_body(job_id: str) -> dict[str, Any]:
    return {
        "jobID": job_id, "image": "trainer", "specName": SPEC,
        "env": [{"name": "GPUCLOUD_SIM_RUN_FOR", "value": RUN_FOR}],
    }  # fmt: skip


def bare_job(namespace: str, index: int) -> Any:
    """The Job gpucloud would make for `job_body`, labelled as the bench's own."""
    body = JobCreate.model_validate(job_body(f"bare-{index}"))
    pod = manifests.WorkloadPod(
        namespace_name=namespace, tenant_id="bench", spec_name=SPEC, image=body.image,
        template=body.template, cpu="4", memory="16Gi", gpus=1, gpu_type=PRODUCT, zones=[],
    )  # fmt: skip
    pods = job_manifests.JobPods(pod, f"bare-{index}", retry_limit=0, deadline_seconds=None)
    manifest = job_manifests.batch_job(pods, parallelism=1, completions=1)
    labels = {BARE_LABEL: "bare"}
    manifest["metadata"]["labels"] = labels
    manifest["spec"]["template"]["metadata"]["labels"] = labels
    return manifest


class RunningPods:
    """Counts distinct pods seen Running by a watch over every namespace, of those whose
    labels `keep` accepts."""

    def __init__(
        self,
        core: k8s.CoreV1Api,
        label_selector: str,
        keep: Callable[[dict[str, str]], bool] = lambda _: True,
    ) -> None:
        self._core, self._selector, self._keep = core, label_selector, keep
        self.running: set[str] = set()
        self.all_running_at: float | None = None
        self._wanted = 0
        self._task: asyncio.Task[None] | None = None

    async def start(self, wanted: int) -> None:
        self._wanted = wanted
        self._task = asyncio.create_task(self._watch())
        await asyncio.sleep(0.5)  # the watch is established

    async def wait(self, timeout_s: float) -> float:
        deadline = time.perf_counter() + timeout_s
        while self.all_running_at is None:
            if time.perf_counter() > deadline:
                raise TimeoutError(f"{len(self.running)} of {self._wanted} pods running")
            await asyncio.sleep(0.2)
        return self.all_running_at

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _watch(self) -> None:
        while True:
            stream = watch.Watch()
            try:
                async for event in stream.stream(
                    self._core.list_pod_for_all_namespaces,
                    label_selector=self._selector,
                    timeout_seconds=300,
                ):
                    pod = event["object"]
                    if (
                        pod.status
                        and pod.status.phase == "Running"
                        and self._keep(pod.metadata.labels or {})
                    ):
                        self.running.add(f"{pod.metadata.namespace}/{pod.metadata.name}")
                        if len(self.running) >= self._wanted and self.all_running_at is None:
                            self.all_running_at = time.perf_counter()
            finally:
                await stream.close()


class PeakMemory:
    """The instances service's resident memory, sampled twice a second."""

    def __init__(self) -> None:
        self.peak_mib = 0.0
        self._task: asyncio.Task[None] | None = None

    @staticmethod
    def now_mib() -> float:
        pid = layout.pid_file("instances").read_text().strip()
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return 0.0

    def start(self) -> None:
        async def sample() -> None:
            while True:
                self.peak_mib = max(self.peak_mib, self.now_mib())
                await asyncio.sleep(0.5)

        self._task = asyncio.create_task(sample())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


async def in_parallel(count: int, concurrency: int, one: Any) -> None:
    gate = asyncio.Semaphore(concurrency)

    async def guarded(index: int) -> None:
        async with gate:
            await one(index)

    await asyncio.gather(*(guarded(i) for i in range(count)))


async def bare_path(bench: Bench, batch: k8s.BatchV1Api, args: argparse.Namespace) -> float:
    namespace = f"bench-queue-{uuid.uuid4().hex[:6]}"
    await bench.core.create_namespace({"metadata": {"name": namespace}})  # type: ignore[arg-type]
    await asyncio.sleep(1)  # the namespace's default service account
    pods = RunningPods(bench.core, f"{BARE_LABEL}=bare")
    await pods.start(args.jobs)
    try:
        started = time.perf_counter()

        async def create(index: int) -> None:
            await batch.create_namespaced_job(namespace, bare_job(namespace, index))

        await in_parallel(args.jobs, args.concurrency, create)
        submitted = time.perf_counter() - started
        elapsed = await pods.wait(args.timeout) - started
    finally:
        await pods.stop()
        await bench.drop_namespace(namespace)
    print(f"bare   submitted {args.jobs} Jobs in {submitted:.1f} s; all running after "
          f"{elapsed:.1f} s ({args.jobs / elapsed:.1f} jobs/s)", flush=True)  # fmt: skip
    return elapsed


async def api_path(bench: Bench, http: httpx.AsyncClient, args: argparse.Namespace) -> float:
    pods = RunningPods(
        bench.core,
        f"{manifests.TENANT}={bench.tenant}",
        keep=lambda labels: labels.get(manifests.JOB, "").startswith("q-"),
    )
    memory = PeakMemory()
    idle_mib = PeakMemory.now_mib()
    await pods.start(args.jobs)
    memory.start()
    try:
        started = time.perf_counter()

        async def submit(index: int) -> None:
            response = await http.post("/jobs", json=job_body(f"q-{index}"), auth=bench.auth())
            assert response.status_code in (200, 202), response.text

        await in_parallel(args.jobs, args.concurrency, submit)
        submitted = time.perf_counter() - started
        elapsed = await pods.wait(args.timeout) - started
    finally:
        await pods.stop()
        await memory.stop()
    waits, admitted_within = await admission_waits(bench, http)
    print(f"api    submitted {args.jobs} jobs in {submitted:.1f} s "
          f"({args.jobs / submitted:.1f}/s); all running after {elapsed:.1f} s "
          f"({args.jobs / elapsed:.1f} jobs/s)", flush=True)  # fmt: skip
    print(f"api    admitted {len(waits)} jobs within {admitted_within:.1f} s of the first "
          f"submission ({len(waits) / admitted_within:.1f} jobs/s)", flush=True)  # fmt: skip
    print(f"api    queue decision (submitted to admitted): p50={percentile(waits, 50):.2f} s  "
          f"p99={percentile(waits, 99):.2f} s  max={max(waits):.2f} s", flush=True)  # fmt: skip
    print(f"api    instances service memory: {idle_mib:.0f} MiB before, "
          f"{memory.peak_mib:.0f} MiB at peak", flush=True)  # fmt: skip
    return elapsed


async def admission_waits(bench: Bench, http: httpx.AsyncClient) -> tuple[list[float], float]:
    """Each job's seconds from its submission to its admission, from its history, and
    the seconds from the first submission to the last admission."""
    waits: list[float] = []
    first_queued: datetime | None = None
    last_admitted: datetime | None = None
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 500, **({"cursor": cursor} if cursor else {})}
        page = (await http.get("/jobs", params=params, auth=bench.auth())).json()
        for job in page["items"]:
            history = {h["state"]: datetime.fromisoformat(h["at"]) for h in job["history"]}
            if "admitted" in history and job["jobID"].startswith("q-"):
                queued, admitted = history["queued"], history["admitted"]
                waits.append((admitted - queued).total_seconds())
                first_queued = min(first_queued or queued, queued)
                last_admitted = max(last_admitted or admitted, admitted)
        cursor = page.get("nextCursor")
        if not cursor:
            if first_queued is None or last_admitted is None:
                raise RuntimeError("no job was admitted")
            return waits, (last_admitted - first_queued).total_seconds()


async def forget_tenant(bench: Bench, env: dict[str, str]) -> None:
    """Delete the bench tenant: the instances service cancels its jobs. Then wait until
    its pods are gone."""
    broker = create_broker(KafkaConnection.from_env(env), client_id="bench")
    await broker.start()
    await publish_event(broker, TENANTS, TenantDeleted(tenant_id=bench.tenant), source="/bench")
    await broker.stop()
    selector = f"{manifests.TENANT}={bench.tenant}"
    while (await bench.core.list_pod_for_all_namespaces(label_selector=selector, limit=1)).items:
        await asyncio.sleep(1)


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench queue", description=__doc__)
    parser.add_argument("--jobs", type=int, default=10_000, help="one-GPU jobs per path")
    parser.add_argument("--nodes", type=int, default=1_000, help="kwok GPU nodes")
    parser.add_argument("--gpus-per-node", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=32, help="submissions in flight")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds a path may take")
    return parser


async def main(args: argparse.Namespace) -> None:
    if args.nodes * args.gpus_per_node < args.jobs:
        raise SystemExit("the nodes must hold every job at once: raise --nodes or --gpus-per-node")
    env = stack_env()
    async with (
        await kube_client(env) as kube,
        httpx.AsyncClient(base_url=env["GPUCLOUD_INSTANCES_URL"], timeout=120) as http,
    ):
        bench = Bench(env, kube, http)
        try:
            await bench.remove_nodes()  # those of an earlier run that was killed
            await bench.add_nodes("queue", args.nodes, PRODUCT, gpus=args.gpus_per_node)
            await bench.provision(max_gpus=args.jobs, max_instances=args.jobs)
            await bench.spec(SPEC, PRODUCT)
            await wait_tenant(bench, http)
            print(f"{args.jobs} one-GPU jobs on {args.nodes} kwok nodes of "
                  f"{args.gpus_per_node} GPUs", flush=True)  # fmt: skip
            bare = await bare_path(bench, k8s.BatchV1Api(kube), args)
            api = await api_path(bench, http, args)
            print(f"api/bare time to all running: x{api / bare:.2f}", flush=True)
        finally:
            await forget_tenant(bench, env)
            await bench.remove_nodes()


async def wait_tenant(bench: Bench, http: httpx.AsyncClient) -> None:
    """Untimed: a probe job is accepted once the tenant's event reached the service."""
    while True:
        body = {**job_body("probe"), "env": []}  # a one-second run
        response = await http.post("/jobs", json=body, auth=bench.auth())
        if response.status_code in (200, 202):
            return
        await asyncio.sleep(0.2)
