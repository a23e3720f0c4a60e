"""Warm stock targets (seed 004; platform admin). The controller's stock pool fills them."""

from __future__ import annotations

from gpucloud_libs.errors import ValidationFailed

from ..specs.service import Specs
from ..wakeups import STOCKS, ControllerWakeups
from .documents import StockUnitDoc
from .schemas import StockChange, StockStatus
from .store import StockStore


class StockTargets:
    def __init__(self, specs: Specs, stocks: StockStore, wakeups: ControllerWakeups) -> None:
        self._specs = specs
        self._stocks = stocks
        self._wakeups = wakeups

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
        delta = change.number if add else -change.number
        await self._stocks.record_operation(
            change.spec_name, delta, change.operation_id, change.images
        )
        await self._wakeups.wake(STOCKS)
        [status] = [s for s in await self.status() if s.spec_name == change.spec_name]
        return status

    async def status(self) -> list[StockStatus]:
        return stock_status(
            await self._stocks.targets(), await self._stocks.units(), await self._stocks.images()
        )


def stock_status(
    targets: dict[str, int], units: list[StockUnitDoc], images: dict[str, list[str]] | None = None
) -> list[StockStatus]:
    """Each stocked spec's target against its units, by spec name."""
    result = []
    for spec_name, target in targets.items():
        mine = [unit for unit in units if unit["spec_name"] == spec_name]
        result.append(
            StockStatus(
                spec_name=spec_name,
                target=target,
                available=sum(unit["state"] == "available" for unit in mine),
                placing=sum(unit["state"] == "placing" for unit in mine),
                images=(images or {}).get(spec_name, []),
            )
        )
    return sorted(result, key=lambda status: status.spec_name)
