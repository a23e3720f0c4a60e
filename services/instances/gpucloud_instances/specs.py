"""Instance specs (platform admin): what an instance may be started as."""

from __future__ import annotations

from gpucloud_libs.clock import now
from gpucloud_libs.errors import Conflict, NotFound

from .documents import SpecDoc
from .schemas import Spec, SpecCreate
from .store import SpecStore, StockStore


def spec_view(doc: SpecDoc) -> Spec:
    return Spec(
        name=doc["name"], cpu=doc["cpu"], memory=doc["memory"], gpu_type=doc["gpu_type"],
        gpu_num=doc["gpu_num"], zones=doc["zones"], created_at=doc["created_at"],
    )  # fmt: skip


class Specs:
    def __init__(self, specs: SpecStore, stocks: StockStore) -> None:
        self._specs = specs
        self._stocks = stocks

    async def create(self, body: SpecCreate) -> Spec:
        spec = Spec(**body.model_dump(), created_at=now())
        if not await self._specs.insert(
            {
                "_id": spec.name, "name": spec.name, "cpu": spec.cpu, "memory": spec.memory,
                "gpu_type": spec.gpu_type, "gpu_num": spec.gpu_num, "zones": spec.zones,
                "created_at": spec.created_at,
            }
        ):  # fmt: skip
            raise Conflict(f"spec {body.name!r} already exists")
        return spec

    async def get(self, name: str) -> Spec:
        doc = await self._specs.get(name)
        if doc is None:
            raise NotFound(f"spec {name!r} does not exist")
        return spec_view(doc)

    async def list(self) -> list[Spec]:
        return [spec_view(doc) for doc in await self._specs.list()]

    async def delete(self, name: str) -> None:
        await self.get(name)
        targets = await self._stocks.targets()
        if targets.get(name, 0) > 0:
            raise Conflict(
                f"spec {name!r} still has a warm stock of {targets[name]}; delete the stock first"
            )
        await self._specs.delete(name)
