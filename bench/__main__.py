"""Run every benchmark, or one: `python -m bench [NAME [OPTIONS]]`; `--help` after a name
lists its options. Arguments are parsed before anything runs, so `--help` only prints.
A check (exactness) runs only when named: it needs options and judges rather than times."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable, Coroutine
from types import ModuleType
from typing import Any

from . import (
    agent_sample,
    chart_install,
    cli_transfer,
    clusters,
    console_load,
    exactness,
    failover,
    gateway_overhead,
    inference_service,
    instance_start,
    metering_throughput,
    monitoring_ingest,
    queue_admission,
    stack_startup,
    storage_transfer,
)

BENCHMARKS: dict[str, ModuleType] = {
    "stack": stack_startup,
    "instances": instance_start,
    "gateway": gateway_overhead,
    "inference": inference_service,
    "metering": metering_throughput,
    "storage": storage_transfer,
    "monitoring": monitoring_ingest,
    "cli": cli_transfer,
    "console": console_load,
    "queue": queue_admission,
    "agent": agent_sample,
    "chart": chart_install,
    "failover": failover,
    "clusters": clusters,
}
#: Run by name only, never in the run of every benchmark.
CHECKS: dict[str, ModuleType] = {
    "exactness": exactness,
}
RUNNABLE = {**BENCHMARKS, **CHECKS}


def _usage() -> str:
    lines = [__doc__ or ""]
    for title, modules in (("benchmarks:", BENCHMARKS), ("checks:", CHECKS)):
        lines.append(title)
        for name, module in modules.items():
            summary = (module.__doc__ or "").strip().splitlines()[0]
            lines.append(f"  {name:<11} {summary}")
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    if argv and argv[0] in ("-h", "--help"):
        print(_usage())
        return
    if argv and argv[0] not in RUNNABLE:
        sys.exit(f"unknown benchmark {argv[0]!r}; choose from {', '.join(RUNNABLE)}")
    chosen = [(argv[0], argv[1:])] if argv else [(name, []) for name in BENCHMARKS]
    runs: list[
        tuple[str, Callable[[argparse.Namespace], Coroutine[Any, Any, None]], argparse.Namespace]
    ] = [
        (name, RUNNABLE[name].main, RUNNABLE[name].parser().parse_args(rest))
        for name, rest in chosen
    ]
    for name, run, args in runs:
        print(f"\n=== {name} ===", flush=True)
        asyncio.run(run(args))


main(sys.argv[1:])
