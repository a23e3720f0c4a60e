"""Warm stocks (seed 004): GPUs set aside for a spec, so its starts skip the scheduler
and, on a real cluster, the image pull.

A unit is `placing` while its placeholder pod, scheduled at the lowest priority,
finds a node and pulls the stock's images there. Once the placeholder runs, the
unit is armed: a hold pod, gated so that it is never bound, is nominated to the
node, and then the placeholder goes. The scheduler keeps the node's GPUs for the
nominated hold. The kubelet never sees the hold. The unit is then `available`.

Each cluster keeps its own stocks, in a pool of its own (its runtime's): a start
claims from the pool of the cluster it was placed in.

A start of the spec claims an available unit in memory, and its pod is created bound
to the unit's node. Nothing is deleted on the start's path (decision 87). The hold
goes once the instance pod is seen. Where a workload pod finds no room, available
units make way for it, as placeholders do when a pod preempts them.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, timedelta

from gpucloud_libs.clock import now
from gpucloud_libs.gpu_shares import GpuShare
from gpucloud_libs.kube import ConflictError, KubeClient, KubeError, Manifest

from .. import manifests
from ..controller.cache import ClusterCache
from ..controller.capacity import pod_gpus
from ..documents import InstanceDoc, SpecDoc
from ..specs.store import SpecStore
from . import manifests as stock_manifests
from .documents import StockUnitDoc
from .store import StockKey, StockStore

log = logging.getLogger(__name__)

#: How long a claimed unit waits for its instance pod before it is let go.
CLAIM_TTL_S = 30.0
#: A unit whose placeholder has not shown up in the cache for this long is replaced.
PLACEHOLDER_GRACE = timedelta(seconds=10)
#: Claimed units are replaced once starts have claimed none for this long, or at
#: once when a spec's stock is empty. A refill is a second pod's worth of work per
#: start, and made during a burst it slowed the burst's starts; on a real cluster
#: its placeholders, pulling images, would not be ready for that burst anyway.
REFILL_QUIET_S = 2.0


@dataclass(frozen=True)
class _Claim:
    unit: str
    node: str
    at: float  # time.monotonic()


class StockPool:
    """One cluster's warm stocks."""

    def __init__(
        self,
        kube: KubeClient,
        cache: ClusterCache,
        specs: SpecStore,
        stocks: StockStore,
        *,
        cluster: str,
        namespace: str,
        wake: Callable[[], None],
    ) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self._kube = kube
        self._cache = cache
        self._specs = specs
        self._stocks = stocks
        self._wake = wake
        # Available units by name, as of the last pass. A claim takes one from here
        # without awaiting, so two starts never take the same unit.
        self._available: dict[str, StockUnitDoc] = {}
        self._claims: dict[str, _Claim] = {}  # instance key -> the unit it claimed
        # The store's units, as this leader wrote them: it is their only writer, so
        # they are read once per leadership (None: not yet), not on every pass.
        self._units: dict[str, StockUnitDoc] | None = None
        self._last_claim = -REFILL_QUIET_S  # time.monotonic()
        # Specs with a stock target, as of the last pass: starts of other specs
        # skip the claim altogether.
        self._stocked_specs: set[str] = set()

    def claim(self, doc: InstanceDoc) -> tuple[str, str] | None:
        """Claim a warm unit of the instance's spec: its (unit, node), where the
        instance pod is bound at once; None when the stock has none available. A
        retry for the same instance gets the same unit."""
        claim = self._claims.get(doc["_id"])
        if claim is None:
            unit = self._take(doc["spec_name"], doc["zones"])
            if unit is None or unit["node"] is None:
                return None
            claim = _Claim(unit["_id"], unit["node"], time.monotonic())
            self._claims[doc["_id"]] = claim
            self._last_claim = claim.at
            self._wake()  # lets the hold go once the pod is seen; refills later
        return claim.unit, claim.node

    def _take(self, spec_name: str, zones: list[str]) -> StockUnitDoc | None:
        """An available unit of the spec on a node that takes pods, out of the pool at
        once (no await in here)."""
        if spec_name not in self._stocked_specs:
            return None
        for name, unit in self._available.items():
            if (
                unit["spec_name"] == spec_name
                and (not zones or unit["zone"] in zones)
                and self._cache.node_usable(unit["node"] or "")
            ):
                del self._available[name]
                return unit
        return None

    async def reconcile(
        self, targets: Mapping[StockKey, int], images: Mapping[StockKey, list[str]]
    ) -> None:
        """Keep each spec's units at its target (`targets` and `images`: every
        cluster's, as the store has them). Claims go on meanwhile (they never wait for
        a pass); a stale view here only over- or under-fills by a unit until the next
        pass."""
        try:
            await self._reconcile(
                {spec: n for (cluster, spec), n in targets.items() if cluster == self.cluster},
                {spec: i for (cluster, spec), i in images.items() if cluster == self.cluster},
            )
        except BaseException:
            self._units = None  # a write may or may not have landed: read them again
            raise

    async def _reconcile(self, targets: dict[str, int], images: dict[str, list[str]]) -> None:
        if self._units is None:
            stored = await self._stocks.units(self.cluster)
            self._units = {unit["_id"]: unit for unit in stored}
        await self._let_go_of_claimed()
        units = {name: unit for name, unit in self._units.items() if name not in self._claimed()}
        await self._observe(units)
        await self._drop_lost(units)
        await self._make_way(units)
        self._stocked_specs = {spec_name for spec_name, target in targets.items() if target > 0}
        for spec_name, target in targets.items():
            live = [unit for unit in units.values() if unit["spec_name"] == spec_name]
            missing = target - len(live)
            if missing > 0 and self._may_refill(len(live)):
                spec = await self._specs.get(spec_name)
                if spec is not None:
                    await self._fill(spec_name, spec, missing, images.get(spec_name, []))
            # Surplus: drop the ones still placing first, then available ones.
            surplus = sorted(live, key=lambda unit: unit["state"] != "placing")[: max(-missing, 0)]
            for unit in surplus:
                await self._release(unit["_id"])
                units.pop(unit["_id"])
        claimed = self._claimed()  # claims made while this pass awaited included
        self._available = {
            name: unit
            for name, unit in units.items()
            if unit["state"] == "available" and unit["node"] and name not in claimed
        }

    def available(self) -> dict[str, int]:
        """Available units per spec, as of the last pass (the clusters pass records
        them, so that placement can prefer a cluster with a warm unit)."""
        counts: dict[str, int] = {}
        for unit in self._available.values():
            counts[unit["spec_name"]] = counts.get(unit["spec_name"], 0) + 1
        return counts

    def _claimed(self) -> set[str]:
        return {claim.unit for claim in self._claims.values()}

    def _may_refill(self, live: int) -> bool:
        if live == 0 or time.monotonic() - self._last_claim >= REFILL_QUIET_S:
            return True
        self._wake()  # look again once the starts quiet down
        return False

    async def _let_go_of_claimed(self) -> None:
        """Units whose instance pods are there go, holds and all: the pod holds the
        GPUs now. So do claims whose pod never came."""
        assert self._units is not None
        in_use = self._cache.stock_units_in_use()
        expired = time.monotonic() - CLAIM_TTL_S
        done = [
            key for key, claim in self._claims.items() if claim.unit in in_use or claim.at < expired
        ]
        ended = {self._claims.pop(key).unit for key in done}
        for name in (in_use | ended) & set(self._units):
            await self._release(name)

    async def _observe(self, units: dict[str, StockUnitDoc]) -> None:
        """Placeholders that run arm their units; pods of no unit go."""
        assert self._units is not None
        for name, pod in list(self._cache.stock_pods.items()):
            unit = units.get(name)
            if name not in self._units:
                if not pod["metadata"].get("deletionTimestamp"):
                    await self._kube.delete("Pod", self.namespace, name, grace_s=0)
            elif (
                unit is not None
                and unit["state"] == "placing"
                and pod.get("spec", {}).get("nodeName")
                and pod.get("status", {}).get("phase") == "Running"
            ):
                await self._arm(unit, pod)
        for name, hold in list(self._cache.stock_holds.items()):
            if name not in self._units and not hold["metadata"].get("deletionTimestamp"):
                hold_name = stock_manifests.hold_name(name)
                await self._kube.delete("Pod", self.namespace, hold_name, grace_s=0)

    async def _arm(self, unit: StockUnitDoc, placeholder: Manifest) -> None:
        """Hand the unit's node from its placeholder to a hold: nominated to the node
        before the placeholder goes, so its GPUs are never free for another pod.
        Each step may be repeated, so a pass cut short is finished by the next."""
        name, node = unit["_id"], placeholder["spec"]["nodeName"]
        hold = stock_manifests.stock_hold_pod(
            namespace_name=self.namespace, unit=name, spec_name=unit["spec_name"],
            resources=placeholder["spec"]["containers"][0]["resources"],
        )  # fmt: skip
        with contextlib.suppress(ConflictError):
            # Known at once: the watch may bring it after this pass looks for it.
            self._cache.stock_holds.setdefault(name, await self._kube.create(hold))
        await self._kube.patch_status(
            "Pod",
            self.namespace,
            stock_manifests.hold_name(name),
            {"status": {"nominatedNodeName": node}},
        )
        await self._kube.delete("Pod", self.namespace, name, grace_s=0)
        zone = self._cache.zone_of(node)
        await self._stocks.mark_available(name, node, zone)
        # `unit` is the leader's own copy of it (`_units`).
        unit["state"], unit["node"], unit["zone"] = "available", node, zone
        if unit["spec_name"] in self._stocked_specs:
            # Offered at once, as the store now says: a start need not wait for the
            # rest of this pass.
            self._available[name] = unit

    async def _drop_lost(self, units: dict[str, StockUnitDoc]) -> None:
        """Units are replaced when their pod vanished (a placeholder preempted or on a
        lost node, a hold deleted) or an available one's node no longer takes pods."""
        grace = now() - PLACEHOLDER_GRACE
        for name, unit in list(units.items()):
            if unit["state"] == "available":
                lost = name not in self._cache.stock_holds or not self._cache.node_usable(
                    unit["node"] or ""
                )
            else:
                lost = (
                    name not in self._cache.stock_pods
                    and unit["created_at"].replace(tzinfo=UTC) < grace
                )
            if lost:
                await self._release(name)
                units.pop(name)

    async def _make_way(self, units: dict[str, StockUnitDoc]) -> None:
        """Available units step aside for workload pods the scheduler found no room
        for, as placeholders are preempted: on a node of the pod's GPU type and zones
        where their holds are all that is in the way, as many as the pod needs."""
        waiting = self._cache.waiting_for_a_node()
        if not waiting:
            return
        node_free = self._cache.gpu_accounting().node_free  # holds not counted
        for pod in waiting:
            gpu_type = (pod["spec"].get("nodeSelector") or {}).get(manifests.GPU_PRODUCT_LABEL)
            zones = manifests.placement_zones(pod)
            for resource, wanted in pod_gpus(pod).items():
                free = node_free.get(GpuShare(resource).capacity_key(gpu_type or ""), {})
                for node, units_free in free.items():
                    if zones and self._cache.zone_of(node) not in zones:
                        continue
                    held = self._held_on(node, resource, units)
                    needed = wanted - (units_free - sum(gpus for _, gpus in held))
                    if needed <= 0 or units_free < wanted:
                        continue  # it fits already, or the units would not be enough
                    for name, gpus in held:
                        await self._release(name)
                        units.pop(name)
                        log.info("a warm unit made way", extra={"unit": name, "node": node})
                        needed -= gpus
                        if needed <= 0:
                            break
                    free[node] = units_free - wanted  # the waiting pod takes them
                    break

    def _held_on(
        self, node: str, resource: str, units: dict[str, StockUnitDoc]
    ) -> list[tuple[str, int]]:
        """The available units on `node`, with the units of `resource` each holds."""
        held = []
        for name, unit in units.items():
            hold = self._cache.stock_holds.get(name)
            gpus = pod_gpus(hold).get(resource, 0) if hold is not None else 0
            if unit["state"] == "available" and unit["node"] == node and gpus:
                held.append((name, gpus))
        return held

    async def _fill(self, spec_name: str, spec: SpecDoc, missing: int, images: list[str]) -> None:
        for _ in range(missing):
            name = f"stock-{spec_name}-{secrets.token_hex(4)}"
            assert self._units is not None
            self._units[name] = await self._stocks.add_unit(name, (self.cluster, spec_name))
            try:
                await self._kube.create(
                    stock_manifests.placeholder_pod(self.namespace, name, spec, images)
                )
            except KubeError as error:
                if error.status != 422:
                    raise
                # Kubernetes will never take this spec's placeholder: say so once
                # per pass and go on with the other specs' stocks.
                await self._forget(name)
                log.error(
                    "stock placeholder refused; fix or delete the spec",
                    extra={"spec": spec_name, "cluster": self.cluster, "error": str(error)[:300]},
                )
                return

    async def _release(self, name: str) -> None:
        """Let a unit go: the pod that holds it (its hold once armed, its placeholder
        before), then its record. A pass cut short in between leaves a pod of no
        unit, or a unit with no pod, which the next pass clears."""
        assert self._units is not None
        unit = self._units.get(name)
        if unit is None:
            return
        self._available.pop(name, None)
        pod = stock_manifests.hold_name(name) if unit["state"] == "available" else name
        await self._kube.delete("Pod", self.namespace, pod, grace_s=0)
        await self._forget(name)

    async def _forget(self, name: str) -> None:
        await self._stocks.remove_unit(name)
        if self._units is not None:
            self._units.pop(name, None)

    def reset(self) -> None:
        """Leadership ended: the next leader reads the units from the store."""
        self._units = None
        self._available.clear()
        self._claims.clear()
        self._stocked_specs.clear()  # the next leader's first pass reads the targets
