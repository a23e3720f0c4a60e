"""Warm stocks (seed 004): placeholder pods that hold a spec's GPUs until a start claims one.

A unit is `placing` until its placeholder runs, then `available` on that node.
A start of the spec claims an available unit: the placeholder goes, and the
instance is bound to the freed node.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable
from datetime import UTC, timedelta

from gpucloud_libs.clock import now
from gpucloud_libs.kube import KubeClient, KubeError

from .. import manifests
from ..documents import InstanceDoc, SpecDoc, StockUnitDoc
from ..store import SpecStore, StockStore
from ..wakeups import STOCKS
from .cache import ClusterCache

log = logging.getLogger(__name__)

#: A unit whose placeholder has not shown up in the cache for this long is replaced.
PLACEHOLDER_GRACE = timedelta(seconds=10)


class StockPool:
    def __init__(
        self,
        kube: KubeClient,
        cache: ClusterCache,
        specs: SpecStore,
        stocks: StockStore,
        *,
        namespace: str,
        wake: Callable[[str], None],
    ) -> None:
        self._kube = kube
        self._cache = cache
        self._specs = specs
        self._stocks = stocks
        self._namespace = namespace
        self._wake = wake
        # Serialises claims, so two starts never take the same warm unit.
        self._claim_lock = asyncio.Lock()
        # Specs with a stock target, as of the last pass: starts of other specs
        # skip the claim (and its lock) altogether.
        self._stocked_specs: set[str] = set()

    async def claim(self, doc: InstanceDoc) -> str | None:
        """Take a warm unit of the instance's spec: its placeholder goes, and its node is
        where the instance is pinned. Returns None when the stock has none available."""
        if doc["spec_name"] not in self._stocked_specs:
            return None
        async with self._claim_lock:
            for unit in await self._stocks.units(doc["spec_name"]):
                node = unit["node"]  # set once the placeholder runs
                if unit["state"] != "available" or node is None:
                    continue
                if doc["zones"] and unit["zone"] not in doc["zones"]:
                    continue
                await self._stocks.remove_unit(unit["_id"])
                await self._kube.delete("Pod", self._namespace, unit["_id"], grace_s=0)
                await self._until_gone(unit["_id"])
                self._wake(STOCKS)  # refill
                return node
        return None

    async def _until_gone(self, placeholder: str, timeout_s: float = 5.0) -> None:
        """Wait until the watch saw the placeholder deleted, so its GPUs are free when
        the instance pod arrives on the same node."""
        deadline = time.monotonic() + timeout_s
        while placeholder in self._cache.stock_pods and time.monotonic() < deadline:  # noqa: ASYNC110 - the watch updates the cache
            await asyncio.sleep(0.005)

    async def reconcile(self) -> None:
        """Keep each spec's units at its target; never under the claim lock, so a
        refill (Kubernetes calls) does not hold up starts. A stale view here only
        over- or under-fills by a unit until the next pass."""
        units = {unit["_id"]: unit for unit in await self._stocks.units()}
        await self._observe_placeholders(units)
        await self._drop_vanished(units)
        targets = await self._stocks.targets()
        self._stocked_specs = {spec_name for spec_name, target in targets.items() if target > 0}
        for spec_name, target in targets.items():
            spec = await self._specs.get(spec_name)
            if spec is None:
                continue
            live = [unit for unit in units.values() if unit["spec_name"] == spec_name]
            missing = target - len(live)
            if missing > 0:
                await self._fill(spec_name, spec, missing)
            # Surplus: drop the ones still placing first, then available ones.
            surplus = sorted(live, key=lambda unit: unit["state"] != "placing")[: max(-missing, 0)]
            for unit in surplus:
                await self._stocks.remove_unit(unit["_id"])
                await self._kube.delete("Pod", self._namespace, unit["_id"], grace_s=0)

    async def _observe_placeholders(self, units: dict[str, StockUnitDoc]) -> None:
        """Running placeholders make their units available where they run; orphans go."""
        for name, pod in list(self._cache.stock_pods.items()):
            unit = units.get(name)
            node = pod.get("spec", {}).get("nodeName")
            if unit is None:
                if not pod["metadata"].get("deletionTimestamp"):
                    await self._kube.delete("Pod", self._namespace, name, grace_s=0)
            elif (
                unit["state"] == "placing"
                and node
                and pod.get("status", {}).get("phase") == "Running"
            ):
                await self._stocks.mark_available(name, node, self._cache.zone_of(node))
                unit["state"] = "available"

    async def _drop_vanished(self, units: dict[str, StockUnitDoc]) -> None:
        """Units whose placeholder vanished (preempted, node lost) are replaced."""
        grace = now() - PLACEHOLDER_GRACE
        for name, unit in list(units.items()):
            if (
                name not in self._cache.stock_pods
                and unit["created_at"].replace(tzinfo=UTC) < grace
            ):
                await self._stocks.remove_unit(name)
                units.pop(name)

    async def _fill(self, spec_name: str, spec: SpecDoc, missing: int) -> None:
        for _ in range(missing):
            name = f"stock-{spec_name}-{secrets.token_hex(4)}"
            await self._stocks.add_unit(name, spec_name)
            try:
                await self._kube.create(
                    manifests.placeholder_pod(
                        namespace_name=self._namespace, name=name,
                        spec_name=spec_name, cpu=spec["cpu"], memory=spec["memory"],
                        gpus=spec["gpu_num"], gpu_type=spec["gpu_type"],
                        zones=list(spec.get("zones") or []),
                    )
                )  # fmt: skip
            except KubeError as error:
                if error.status != 422:
                    raise
                # Kubernetes will never take this spec's placeholder: say so once
                # per pass and go on with the other specs' stocks.
                await self._stocks.remove_unit(name)
                log.error(
                    "stock placeholder refused; fix or delete the spec",
                    extra={"spec": spec_name, "error": str(error)[:300]},
                )
                return
