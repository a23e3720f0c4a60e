"""Warm stocks (seed 004): placeholder pods that hold a spec's GPUs until a start claims one.

A unit is `placing` until its placeholder runs, then `available` on that node.
A start of the spec claims an available unit: the placeholder goes, and the
instance is bound to the freed node.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
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
        wake: Callable[[str], object],
    ) -> None:
        self._kube = kube
        self._cache = cache
        self._specs = specs
        self._stocks = stocks
        self._namespace = namespace
        self._wake = wake
        # Available units by name, as of the last pass. A claim takes one from here
        # without awaiting in between, so two starts never take the same unit; a
        # claimed unit stays out of the pool until the store no longer lists it.
        self._available: dict[str, StockUnitDoc] = {}
        self._claimed: set[str] = set()
        # Specs with a stock target, as of the last pass: starts of other specs
        # skip the claim altogether.
        self._stocked_specs: set[str] = set()

    async def claim(self, doc: InstanceDoc) -> str | None:
        """Take a warm unit of the instance's spec and return its node, where the
        instance is bound at once; None when the stock has none available.

        The placeholder is deleted with no grace period, which removes it from the
        API server before the instance pod is created on its node. Nothing waits
        for the watch to report it: on kwok that wait cost more than the scheduler
        the claim saves, and on a real node the kubelet sees the deletion first, on
        the same watch, and frees the placeholder's GPUs before it admits the pod.
        """
        if doc["spec_name"] not in self._stocked_specs:
            return None
        unit = next(
            (
                unit
                for unit in self._available.values()
                if unit["spec_name"] == doc["spec_name"]
                and (not doc["zones"] or unit["zone"] in doc["zones"])
            ),
            None,
        )
        if unit is None:
            return None
        name = unit["_id"]
        del self._available[name]
        self._claimed.add(name)
        await asyncio.gather(
            self._stocks.remove_unit(name),
            self._kube.delete("Pod", self._namespace, name, grace_s=0),
        )
        self._wake(STOCKS)  # refill
        return unit["node"]

    async def reconcile(self) -> None:
        """Keep each spec's units at its target; never under the claim lock, so a
        refill (Kubernetes calls) does not hold up starts. A stale view here only
        over- or under-fills by a unit until the next pass."""
        listed = await self._stocks.units()
        self._claimed &= {unit["_id"] for unit in listed}  # the store dropped the rest
        units = {unit["_id"]: unit for unit in listed if unit["_id"] not in self._claimed}
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
                units.pop(unit["_id"])
        self._available = {
            name: unit
            for name, unit in units.items()
            if unit["state"] == "available" and unit["node"] and name not in self._claimed
        }

    async def _observe_placeholders(self, units: dict[str, StockUnitDoc]) -> None:
        """Running placeholders make their units available where they run; orphans go."""
        for name, pod in list(self._cache.stock_pods.items()):
            unit = units.get(name)
            node = pod.get("spec", {}).get("nodeName")
            if name in self._claimed:
                continue  # deleted by its claim; the watch has not caught up
            if unit is None:
                if not pod["metadata"].get("deletionTimestamp"):
                    await self._kube.delete("Pod", self._namespace, name, grace_s=0)
            elif (
                unit["state"] == "placing"
                and node
                and pod.get("status", {}).get("phase") == "Running"
            ):
                zone = self._cache.zone_of(node)
                await self._stocks.mark_available(name, node, zone)
                unit["state"], unit["node"], unit["zone"] = "available", node, zone

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
