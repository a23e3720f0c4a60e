"""Warm stock targets (seed 004; platform admin). The controller's stock pool fills them."""

from __future__ import annotations

from gpucloud_libs.errors import ValidationFailed

from ..clusters.store import ClusterStore
from ..specs.service import Specs
from ..wakeups import STOCKS, ControllerWakeups
from .documents import StockUnitDoc
from .schemas import StockChange, StockStatus
from .store import StockKey, StockStore


class StockTargets:
    def __init__(
        self, specs: Specs, stocks: StockStore, clusters: ClusterStore, wakeups: ControllerWakeups,
        *, home: str,
    ) -> None:  # fmt: skip
        self._specs = specs
        self._stocks = stocks
        self._clusters = clusters
        self._wakeups = wakeups
        self._home = home

    async def change(self, change: StockChange, *, add: bool) -> StockStatus:
        if not add and change.images is not None:
            raise ValidationFailed("images are set when adding units, not when removing them")
        spec = await self._specs.get(change.spec_name)
        if add and spec.gpu_sharing == "time-sliced":
            # A start from the stock is bound to the unit's node without the scheduler,
            # which alone keeps a time-sliced node to one tenant.
            raise ValidationFailed(
                "a time-sliced spec has no warm stock: the tenant its node serves is "
                "chosen by the scheduler at each start"
            )
        key = (await self._cluster(change.cluster), change.spec_name)
        delta = change.number if add else -change.number
        await self._stocks.record_operation(key, delta, change.operation_id, change.images)
        await self._wakeups.wake(STOCKS)
        [status] = [s for s in await self.status() if (s.cluster, s.spec_name) == key]
        return status

    async def _cluster(self, name: str | None) -> str:
        """The cluster a change names (the home cluster when none): a 422 for one that
        is not registered."""
        if name is None or name == self._home:
            return self._home
        if await self._clusters.get(name) is None:
            known = sorted(doc["_id"] for doc in await self._clusters.list())
            raise ValidationFailed(
                f"no cluster is named {name!r}; the clusters are {', '.join(known)}",
                field="cluster", clusters=known,
            )  # fmt: skip
        return name

    async def status(self) -> list[StockStatus]:
        return stock_status(
            await self._stocks.targets(), await self._stocks.units(), await self._stocks.images()
        )


def stock_status(
    targets: dict[StockKey, int],
    units: list[StockUnitDoc],
    images: dict[StockKey, list[str]] | None = None,
) -> list[StockStatus]:
    """Each stock's target against its units, by cluster and spec name."""
    result = []
    for (cluster, spec_name), target in targets.items():
        mine = [
            unit for unit in units if (unit["cluster"], unit["spec_name"]) == (cluster, spec_name)
        ]
        result.append(
            StockStatus(
                cluster=cluster,
                spec_name=spec_name,
                target=target,
                available=sum(unit["state"] == "available" for unit in mine),
                placing=sum(unit["state"] == "placing" for unit in mine),
                images=(images or {}).get((cluster, spec_name), []),
            )
        )
    return sorted(result, key=lambda status: (status.cluster, status.spec_name))
