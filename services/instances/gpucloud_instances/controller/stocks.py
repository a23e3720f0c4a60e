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
from gpucloud_libs.gpu_shares import GpuShare
from gpucloud_libs.kube import KubeClient, KubeError

from .. import manifests
from ..documents import InstanceDoc, SpecDoc, StockUnitDoc
from ..store import SpecStore, StockStore
from .cache import ClusterCache

log = logging.getLogger(__name__)

#: How long a unit reserved at admission waits for its instance's first reconcile.
RESERVATION_TTL_S = 30.0
#: A unit whose placeholder has not shown up in the cache for this long is replaced.
PLACEHOLDER_GRACE = timedelta(seconds=10)
#: Claimed units are replaced once starts have claimed none for this long, or at
#: once when a spec's stock is empty. A refill is a second pod's worth of work per
#: start, and made during a burst it slowed the burst's starts; on a real cluster
#: its placeholders, pulling images, would not be ready for that burst anyway.
REFILL_QUIET_S = 2.0


class StockPool:
    def __init__(
        self,
        kube: KubeClient,
        cache: ClusterCache,
        specs: SpecStore,
        stocks: StockStore,
        *,
        namespace: str,
        wake: Callable[[], None],
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
        self._pending_removals: set[str] = set()  # claimed units the store still lists
        self._reserved: dict[str, asyncio.Task[str | None]] = {}  # instance key -> its claim
        # The store's units, as this leader wrote them: it is their only writer, so
        # they are read once per leadership (None: not yet), not on every pass.
        self._units: dict[str, StockUnitDoc] | None = None
        self._last_claim = -REFILL_QUIET_S  # time.monotonic()
        # Specs with a stock target, as of the last pass: starts of other specs
        # skip the claim altogether.
        self._stocked_specs: set[str] = set()

    def reserve(self, key: str, spec_name: str, zones: list[str]) -> None:
        """Start claiming a warm unit for an instance the API has just admitted, so
        its placeholder is being deleted while the instance is recorded and the
        controller woken. `claim` then finds the node ready."""
        unit = self._take(spec_name, zones)
        if unit is None:
            return
        task = asyncio.create_task(self._free(unit))
        task.add_done_callback(_log_failed_reservation)
        self._reserved[key] = task
        # Unused (the instance was never recorded): the node is free all the same,
        # and the refill replaces the unit.
        asyncio.get_running_loop().call_later(RESERVATION_TTL_S, self._reserved.pop, key, None)

    async def claim(self, doc: InstanceDoc) -> str | None:
        """Take a warm unit of the instance's spec and return its node, where the
        instance is bound at once; None when the stock has none available.

        The placeholder is deleted with no grace period, which removes it from the
        API server before the instance pod is created on its node. Nothing waits
        for the watch to report it: on kwok that wait cost more than the scheduler
        the claim saves, and on a real node the kubelet sees the deletion first, on
        the same watch, and frees the placeholder's GPUs before it admits the pod.
        """
        reserved = self._reserved.pop(doc["_id"], None)
        if reserved is not None:
            node: str | None = await reserved
            return node
        unit = self._take(doc["spec_name"], doc["zones"])
        return None if unit is None else await self._free(unit)

    def _take(self, spec_name: str, zones: list[str]) -> StockUnitDoc | None:
        """An available unit of the spec, out of the pool at once (no await in here)."""
        if spec_name not in self._stocked_specs:
            return None
        unit = next(
            (
                unit
                for unit in self._available.values()
                if unit["spec_name"] == spec_name and (not zones or unit["zone"] in zones)
            ),
            None,
        )
        if unit is not None:
            del self._available[unit["_id"]]
            self._claimed.add(unit["_id"])
        return unit

    async def _free(self, unit: StockUnitDoc) -> str | None:
        """Delete a taken unit's placeholder; its node, for the instance."""
        try:
            await self._kube.delete("Pod", self._namespace, unit["_id"], grace_s=0)
        except BaseException:
            self._claimed.discard(unit["_id"])  # still placed: the next pass offers it again
            raise
        # Off the start's path: until the store forgets the unit, _claimed keeps it out.
        self._pending_removals.add(unit["_id"])
        self._last_claim = time.monotonic()
        self._wake()  # refill, once the burst of starts is over
        return unit["node"]

    async def reconcile(self) -> None:
        """Keep each spec's units at its target. Claims go on meanwhile (they never
        wait for a pass); a stale view here only over- or under-fills by a unit until
        the next pass."""
        try:
            await self._reconcile()
        except BaseException:
            self._units = None  # a write may or may not have landed: read them again
            raise

    async def _reconcile(self) -> None:
        if self._units is None:
            self._units = {unit["_id"]: unit for unit in await self._stocks.units()}
        for name in list(self._pending_removals):
            await self._remove_unit(name)
            self._pending_removals.discard(name)
        self._claimed &= set(self._units)  # the store dropped the rest
        units = {name: unit for name, unit in self._units.items() if name not in self._claimed}
        await self._observe_placeholders(units)
        await self._drop_vanished(units)
        targets = await self._stocks.targets()
        images = await self._stocks.images()
        self._stocked_specs = {spec_name for spec_name, target in targets.items() if target > 0}
        for spec_name, target in targets.items():
            spec = await self._specs.get(spec_name)
            if spec is None:
                continue
            live = [unit for unit in units.values() if unit["spec_name"] == spec_name]
            missing = target - len(live)
            if missing > 0 and self._may_refill(len(live)):
                await self._fill(spec_name, spec, missing, images.get(spec_name, []))
            # Surplus: drop the ones still placing first, then available ones.
            surplus = sorted(live, key=lambda unit: unit["state"] != "placing")[: max(-missing, 0)]
            for unit in surplus:
                await self._remove_unit(unit["_id"])
                await self._kube.delete("Pod", self._namespace, unit["_id"], grace_s=0)
                units.pop(unit["_id"])
        self._available = {
            name: unit
            for name, unit in units.items()
            if unit["state"] == "available" and unit["node"] and name not in self._claimed
        }

    def _may_refill(self, live: int) -> bool:
        if live == 0 or time.monotonic() - self._last_claim >= REFILL_QUIET_S:
            return True
        self._wake()  # look again once the starts quiet down
        return False

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
                # `unit` is the leader's own copy of it (`_units`).
                unit["state"], unit["node"], unit["zone"] = "available", node, zone

    async def _drop_vanished(self, units: dict[str, StockUnitDoc]) -> None:
        """Units whose placeholder vanished (preempted, node lost) are replaced."""
        grace = now() - PLACEHOLDER_GRACE
        for name, unit in list(units.items()):
            if (
                name not in self._cache.stock_pods
                and unit["created_at"].replace(tzinfo=UTC) < grace
            ):
                await self._remove_unit(name)
                units.pop(name)

    async def _fill(self, spec_name: str, spec: SpecDoc, missing: int, images: list[str]) -> None:
        for _ in range(missing):
            name = f"stock-{spec_name}-{secrets.token_hex(4)}"
            assert self._units is not None
            self._units[name] = await self._stocks.add_unit(name, spec_name)
            try:
                await self._kube.create(
                    manifests.placeholder_pod(
                        namespace_name=self._namespace, name=name,
                        spec_name=spec_name, cpu=spec["cpu"], memory=spec["memory"],
                        gpus=spec["gpu_num"], gpu_type=spec["gpu_type"],
                        zones=list(spec.get("zones") or []), images=images,
                        gpu_resource=GpuShare.of(spec).resource,
                    )
                )  # fmt: skip
            except KubeError as error:
                if error.status != 422:
                    raise
                # Kubernetes will never take this spec's placeholder: say so once
                # per pass and go on with the other specs' stocks.
                await self._remove_unit(name)
                log.error(
                    "stock placeholder refused; fix or delete the spec",
                    extra={"spec": spec_name, "error": str(error)[:300]},
                )
                return

    async def _remove_unit(self, name: str) -> None:
        await self._stocks.remove_unit(name)
        if self._units is not None:
            self._units.pop(name, None)

    def reset(self) -> None:
        """Leadership ended: the next leader reads the units from the store."""
        self._units = None
        self._available.clear()


def _log_failed_reservation(task: asyncio.Task[str | None]) -> None:
    """A reservation whose instance never came for it still reports its failure."""
    if not task.cancelled() and task.exception() is not None:
        log.warning("freeing a reserved warm unit failed", extra={"error": str(task.exception())})
