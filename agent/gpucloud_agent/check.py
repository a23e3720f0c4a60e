"""`python -m gpucloud_agent --check`: what an operator runs on a new GPU host.

Each check prints one line, `ok` or `FAIL`, and a failure names its fix: the NVIDIA
driver and CUDA, the GPUs and the product name their spec's `gpuType` must match,
MIG, one timed sample against the 1 ms per GPU budget, the XID event set, whether
GPU processes can be tied to their pods (their cgroups), and Kafka with the agent's
own credentials. The exit code is 0 when every check holds, 3 when there is no
driver or GPU (as `--once`), and 1 otherwise.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpucloud_libs.kafka_connection import KafkaConnection
from gpucloud_libs.naming import gpu_product
from gpucloud_libs.topics import TELEMETRY, require_topics

from .nvml import NvmlSource, NvmlUnavailable, pod_uid_of

#: A sample of every GPU must fit well inside the 1 s loop; 1 ms per GPU is the
#: budget the agent is built to (42 ms was measured before PCIe left the path).
SAMPLE_BUDGET_MS = 1.0
NO_GPU = 3


@dataclass(frozen=True)
class Outcome:
    name: str
    ok: bool
    detail: str
    fix: str = ""

    def line(self) -> str:
        mark = "ok  " if self.ok else "FAIL"
        text = f"{mark} {self.name:<11} {self.detail}"
        return f"{text}\n     {'':<11} fix: {self.fix}" if not self.ok and self.fix else text


def run_checks(kafka: KafkaConnection, say: Callable[[str], None] = print) -> int:
    """Run every check, printing each as it ends; the exit code."""
    outcomes: list[Outcome] = []
    # The client's own retries would log over the report; its outcome is the report.
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)

    def report(outcome: Outcome) -> None:
        outcomes.append(outcome)
        say(outcome.line())

    source = NvmlSource()
    try:
        source.open()
    except NvmlUnavailable as error:
        report(Outcome("driver", False, str(error), _DRIVER_FIX))
        report(_kafka(kafka))
        return NO_GPU
    try:
        for outcome in _gpu_checks(source):
            report(outcome)
    finally:
        source.close()
    report(_kafka(kafka))
    return 0 if all(outcome.ok for outcome in outcomes) else 1


_DRIVER_FIX = (
    "install the NVIDIA driver so that nvidia-smi works; in a container, run the agent "
    "with the NVIDIA container runtime (the chart's DaemonSet sets runtimeClassName)"
)


def _gpu_checks(source: NvmlSource) -> list[Outcome]:
    inventory = source.inventory()
    first = inventory[0]
    cuda_major = int(first.cuda_version.split(".")[0]) if first.cuda_version else 0
    outcomes = [
        Outcome(
            "driver",
            cuda_major >= 12,
            f"driver {first.driver_version}, CUDA {first.cuda_version}",
            "CUDA 12 or later is needed by the catalog's images: upgrade the driver",
        ),
        Outcome(
            "gpus",
            True,
            f"{len(inventory)} x {first.name}: spec gpuType {gpu_product(first.name)!r}, "
            f"{first.memory_total_mib:,.0f} MiB each",
        ),
        Outcome(
            "mig",
            True,
            ", ".join(
                f"GPU {gpu.index} {'on' if gpu.mig_mode else 'off' if gpu.mig_mode is False else 'n/a'}"
                for gpu in inventory
            ),
        ),
    ]
    source.sample()  # the first reads warm NVML's caches up
    started = time.perf_counter()
    samples = source.sample()
    per_gpu_ms = (time.perf_counter() - started) * 1000 / max(len(samples), 1)
    outcomes.append(
        Outcome(
            "sample",
            per_gpu_ms <= SAMPLE_BUDGET_MS,
            f"{per_gpu_ms:.3f} ms per GPU (budget {SAMPLE_BUDGET_MS} ms), {len(samples)} samples",
            "a read on the sample path blocks: run `python -m bench agent --nvml` and "
            "report it with this driver version",
        )
    )
    outcomes.append(
        Outcome(
            "xid events",
            source.listens_for_xids,
            "registered for critical XID errors"
            if source.listens_for_xids
            else "the driver refused the XID event set",
            "give the agent the driver's control device (/dev/nvidiactl): the NVIDIA "
            "container runtime, or a privileged DaemonSet",
        )
    )
    outcomes.append(_attribution(source))
    return outcomes


def _attribution(source: NvmlSource) -> Outcome:
    """GPU processes are tied to pods by their cgroup: the agent must see them."""
    fix = "run the agent with hostPID: true and /proc readable (the chart's DaemonSet does)"
    pids = sorted({pid for found in source.processes().values() for pid in found})
    if not pids:
        readable = Path("/proc/self/cgroup").is_file()
        return Outcome(
            "attribution",
            readable,
            "no GPU process running now; cgroups are readable"
            if readable
            else "/proc/self/cgroup is not readable",
            fix,
        )
    unseen = [pid for pid in pids if not Path(f"/proc/{pid}/cgroup").is_file()]
    in_pods = [pid for pid in pids if pod_uid_of(pid) is not None]
    return Outcome(
        "attribution",
        not unseen,
        f"{len(pids)} GPU processes, {len(in_pods)} in Kubernetes pods"
        + (f"; cannot see {unseen[:5]}" if unseen else ""),
        fix,
    )


def _kafka(kafka: KafkaConnection) -> Outcome:
    who = kafka.username or "no SASL user"
    try:
        asyncio.run(asyncio.wait_for(require_topics(kafka, [TELEMETRY]), timeout=15))
    except Exception as error:  # every failure is reported, with its fix
        reason = str(error) or type(error).__name__
        return Outcome(
            "kafka",
            False,
            f"{kafka.bootstrap} as {who}: {reason}",
            "set GPUCLOUD_KAFKA_BOOTSTRAP, GPUCLOUD_KAFKA_USERNAME and GPUCLOUD_KAFKA_PASSWORD "
            "to the agent's principal (docs/kafka.md), and check the broker is reachable",
        )
    return Outcome("kafka", True, f"{kafka.bootstrap} as {who}: sees {TELEMETRY.name}")
