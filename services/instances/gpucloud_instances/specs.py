"""Instance specs (platform admin): what an instance may be started as."""

from __future__ import annotations

from gpucloud_libs.clock import now
from gpucloud_libs.errors import Conflict, NotFound

from .schemas import Spec, SpecCreate
from .store import SpecStore, StockStore


class Specs:
    def __init__(self, specs: SpecStore, stocks: StockStore) -> None:
        self._specs = specs
        self._stocks = stocks

    async def create(self, body: SpecCreate) -> Spec:
        spec = Spec(**body.model_dump(), created_at=now())
        if not await self._specs.insert(spec.model_dump()):
            raise Conflict(f"spec {body.name!r} already exists")
        return spec

    async def get(self, name: str) -> Spec:
        doc = await self._specs.get(name)
        if doc is None:
            raise NotFound(f"spec {name!r} does not exist")
        return Spec.model_validate(doc)

    async def list(self) -> list[Spec]:
        return [Spec.model_validate(doc) for doc in await self._specs.list()]

    async def delete(self, name: str) -> None:
        await self.get(name)
        targets = await self._stocks.targets()
        if targets.get(name, 0) > 0:
            raise Conflict(
                f"spec {name!r} still has a warm stock of {targets[name]}; delete the stock first"
            )
        await self._specs.delete(name)
