"""Metering reads over a long history: one month's usage across all tenants,
through instance spans against reading every recorded fact, side by side.

A database of its own (dropped at the end) gets `--instances` instances spread
evenly over `--months` months, each running for a day, recorded as the metering
service records them; the spans are then built from them (what an upgraded
deployment does once). Then the last month's usage across all tenants, each
path `--reads` times:
  spans  the spans of that month and those still billing (what metering reads)
  facts  every recorded transition (what it read before spans)
Both must come to the same GPU-µs, or the bench fails.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta

from pymongo import AsyncMongoClient

from gpucloud_libs.mongo import Document
from gpucloud_metering import ledger, store
from gpucloud_metering.service import FaultBook, InstanceFacts, PriceBook, instances_from, tally

from .common import percentile, stack_env


def _history(instances: int, months: int, first: datetime) -> list[Document]:
    documents = []
    span_us = ledger.to_us(first + timedelta(days=30 * months)) - ledger.to_us(first)
    for n in range(instances):
        tenant_id, instance_id = f"tenant-{n % 50}", f"instance-{n}"
        start = ledger.to_us(first) + span_us * n // instances
        for sequence, state, at_us in [
            (1, "running", start),
            (2, "stopped", start + 86_400 * 10**6),
        ]:
            documents.append(
                {"_id": f"{tenant_id}/{instance_id}#{sequence}", "tenant_id": tenant_id,
                 "instance_id": instance_id, "sequence": sequence, "state": state,
                 "at_us": at_us, "spec_name": "h100x1", "gpu_type": "H100", "gpu_count": 1,
                 "zone": "zone-a", "node": f"node-{n % 64}", "user_id": "-", "recorded_us": at_us}
            )  # fmt: skip
    return documents


def _gpu_us(instances: list[InstanceFacts], start_us: int, end_us: int) -> int:
    rows = tally(
        instances, [], PriceBook([]), FaultBook([]),
        start_us=start_us, end_us=end_us, now_us=end_us, group_by="spec",
    )  # fmt: skip
    return sum(row.gpu_us for row in rows.values())


async def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench metering-reads")
    parser.add_argument("--instances", type=int, default=6_000)
    parser.add_argument("--months", type=int, default=12)
    parser.add_argument("--reads", type=int, default=5)
    args = parser.parse_args(argv if argv is not None else sys.argv[2:])

    client: AsyncMongoClient[Document] = AsyncMongoClient(stack_env()["GPUCLOUD_MONGODB_URI"])
    name = f"gpucloud_bench_reads_{uuid.uuid4().hex[:8]}"
    try:
        facts = store.FactStore(client[name])
        first = datetime(2030, 1, 1, tzinfo=UTC)
        history = _history(args.instances, args.months, first)
        for index in range(0, len(history), 1_000):
            await facts.record_transitions(history[index : index + 1_000])
        began = time.perf_counter()
        await facts.build_spans()
        built_s = time.perf_counter() - began
        print(f"history: {len(history):,} transitions of {args.instances:,} instances over "
              f"{args.months} months; spans built in {built_s:.1f} s")  # fmt: skip

        period = ledger.months_between(*(doc["at_us"] for doc in (history[0], history[-1])))[-2]
        start_us, end_us = ledger.month_bounds(period)

        async def through_spans() -> list[Document]:
            return await facts.transitions_active(None, start_us, end_us)

        async def every_fact() -> list[Document]:
            return await facts.transitions(None)

        paths = {"spans": through_spans, "facts": every_fact}
        totals = {}
        print(f"usage of {period}, all tenants, {args.reads} reads each:")
        print(f"{'path':<6} {'transitions read':>16} {'p50 ms':>9} {'max ms':>9}")
        for path, read in paths.items():
            took = []
            for _ in range(args.reads):
                began = time.perf_counter()
                documents = await read()
                instances = instances_from(documents)
                totals[path] = _gpu_us(instances, start_us, end_us)
                took.append((time.perf_counter() - began) * 1000)
            print(f"{path:<6} {len(documents):>16,} {percentile(took, 50):>9.1f} {max(took):>9.1f}")
        if totals["spans"] != totals["facts"]:
            raise SystemExit(f"the paths disagree: {totals}")
        print(f"both paths: {totals['spans'] / ledger.US_PER_HOUR:,.1f} GPU-hours in {period}")
    finally:
        await client.drop_database(name)
        await client.close()
