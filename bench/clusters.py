"""Placement across clusters: decisions per second, and start latency with two clusters
of 500 kwok nodes each against one cluster of 1,000.

One after the other in one run, on the local stack's two clusters:
  one cluster   1,000 8-GPU nodes of one product in the home cluster; each start
                leaves the choice to the platform
  two clusters  then, those gone, 500 nodes of another product in each cluster;
                starts alternate between the two regions, so each takes half
Starts run one after another (latencies, not queueing), each stopped once it runs;
the first few of each path are not timed (a tenant's first start in a cluster makes
its namespace there).
Placement decisions per second: `choose_cluster` in process, over the clusters as the
leader's last looks recorded them during each path, for a spec of each path (what
every API replica runs per create, after its one read of the clusters a second),
timed in turns once the nodes are gone.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import httpx

from gpucloud_instances.clusters.documents import ClusterDoc, ClusterGpusDoc, ClusterStatusDoc
from gpucloud_instances.clusters.placement import choose_cluster
from gpucloud_libs.naming import GPU_RESOURCE

from .cluster_support import HOME, SECOND, clusters, second_cluster_client, wait_offered
from .common import kube_client, percentile, stack_env
from .instance_start import WARM_UP_STARTS, Bench, summary

ONE_PRODUCT, TWO_PRODUCT = "BENCH-ONE-GPU", "BENCH-TWO-GPU"
NODES = 1000
#: Placement decisions timed per path and round, and the rounds (the median is shown).
DECISIONS = 100_000
ROUNDS = 5


def as_docs(views: list[dict[str, Any]]) -> list[ClusterDoc]:
    """The clusters' API views as the store keeps them (what placement reads)."""
    docs = []
    for view in views:
        health = view["health"]
        status = None
        if health is not None:
            status = ClusterStatusDoc(
                reachable=health["reachable"], checked_at=health["checkedAt"],
                unreachable_since=None, version=health["version"], nodes=health["nodes"],
                ready_nodes=health["readyNodes"], zones=health["zones"], error=None,
                gpus=[
                    ClusterGpusDoc(gpu_type=g["gpuType"], resource=g["resource"],
                                   capacity=g["capacity"], free=g["free"] or 0)
                    for g in health["gpus"]
                ],
                warm=health.get("warm", {}),
            )  # fmt: skip
        doc = ClusterDoc(
            _id=view["name"], region=view["region"], zones=view["zones"], home=view["home"],
            server=None, uid=None, sealed_kubeconfig=None, state=view["state"],
            status=status, created_at=view["createdAt"],
        )  # fmt: skip
        docs.append(doc)
    return docs


def decisions_per_s(docs: list[ClusterDoc], product: str, regions: list[str | None]) -> float:
    started = time.perf_counter()
    for index in range(DECISIONS):
        choose_cluster(
            docs, product, GPU_RESOURCE, region=regions[index % len(regions)], zones=[],
            spec_name="bench",
        )  # fmt: skip
    return DECISIONS / (time.perf_counter() - started)


async def starts(
    bench: Bench, spec: str, count: int, regions: list[str | None]
) -> dict[str, list[float]]:
    """`count` sequential starts, each stopped once it runs; latencies by the cluster
    each was placed in."""
    by_cluster: dict[str, list[float]] = {}
    for index in range(WARM_UP_STARTS + count):
        region = regions[index % len(regions)]
        elapsed, created = await bench.start_instance(spec, region=region)
        await bench.stop_all([created["instanceID"]])
        if index >= WARM_UP_STARTS:
            by_cluster.setdefault(created["cluster"], []).append(elapsed)
    return by_cluster


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench clusters", description=__doc__)
    parser.add_argument("--starts", type=int, default=100, help="sequential starts per path")
    parser.add_argument("--nodes", type=int, default=NODES, help="kwok nodes per path, in all")
    return parser


async def main(args: argparse.Namespace) -> None:
    env = stack_env()
    async with (
        await kube_client(env) as home_kube,
        await second_cluster_client(env) as second_kube,
        httpx.AsyncClient(base_url=env["GPUCLOUD_INSTANCES_URL"], timeout=60) as http,
    ):
        home, second = Bench(env, home_kube, http), Bench(env, second_kube, http)
        second.tenant = home.tenant  # one tenant, placed in both clusters
        try:
            for bench in (home, second):
                await bench.remove_nodes()  # those of an earlier run that was killed
            await home.provision(max_gpus=100_000, max_instances=100_000)
            half = args.nodes // 2
            # One cluster of them all, then the same count split between two clusters,
            # each path alone with its nodes (those of the other are deleted first).
            await home.add_nodes("bench-one", args.nodes, ONE_PRODUCT)
            await home.spec("bench-one", ONE_PRODUCT)
            await wait_offered(home, ONE_PRODUCT, {HOME})
            await home.wait_tenant("bench-one")
            one_docs = as_docs(await clusters(home))
            one = await starts(home, "bench-one", args.starts, [None])
            await home.remove_nodes()

            await home.add_nodes("bench-two", half, TWO_PRODUCT)
            await second.add_nodes("bench-two", half, TWO_PRODUCT, zone="zone-c")
            await home.spec("bench-two", TWO_PRODUCT)
            await wait_offered(home, TWO_PRODUCT, {HOME, SECOND})
            two_docs = as_docs(await clusters(home))
            two = await starts(home, "bench-two", args.starts, [HOME, SECOND])
        finally:
            for bench in (home, second):
                await bench.remove_nodes()
    # Timed once the nodes are gone, in turns, so that neither path's figure carries
    # the other's load (kwok keeping a thousand nodes alive takes a core here).
    rates: dict[str, list[float]] = {"one": [], "two": []}
    for _ in range(ROUNDS):
        rates["one"].append(decisions_per_s(one_docs, ONE_PRODUCT, [None]))
        rates["two"].append(decisions_per_s(two_docs, TWO_PRODUCT, [HOME, SECOND]))
    one_rate, two_rate = (statistics.median(rates[path]) for path in ("one", "two"))
    docs = two_docs
    print(
        f"placement across clusters: {len(docs)} clusters registered, {args.nodes} kwok nodes per path"
    )
    print(f"  decisions per second (in process, median of {ROUNDS} rounds of {DECISIONS:,}):")
    print(f"    one cluster of {args.nodes:<5}  {one_rate:12,.0f} /s")
    print(f"    two clusters of {half:<4}  {two_rate:12,.0f} /s  (alternating regions)")
    print(f"  start latency, {args.starts} sequential starts per path, by the cluster placed in:")
    for path, by_cluster in (("one cluster", one), ("two clusters", two)):
        for cluster, seconds in sorted(by_cluster.items()):
            print("    " + summary(f"{path}: {cluster}", seconds))
    every_two = [s for seconds in two.values() for s in seconds]
    every_one = [s for seconds in one.values() for s in seconds]
    print(f"  two clusters over one: p50 x{percentile(every_two, 50) / percentile(every_one, 50):.2f}, "
          f"p99 x{percentile(every_two, 99) / percentile(every_one, 99):.2f}")  # fmt: skip
