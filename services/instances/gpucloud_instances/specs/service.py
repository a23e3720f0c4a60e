"""Instance specs (platform admin): what an instance may be started as."""

from __future__ import annotations

from gpucloud_libs.clock import now
from gpucloud_libs.errors import Conflict, NotFound
from gpucloud_libs.gpu_shares import MIG_RESOURCE_PREFIX, GpuShare

from ..documents import SpecDoc
from ..stocks.store import StockStore
from .schemas import Spec, SpecCreate
from .store import SpecStore


def spec_view(doc: SpecDoc) -> Spec:
    share = GpuShare.of(doc)
    return Spec(
        name=doc["name"], cpu=doc["cpu"], memory=doc["memory"], gpu_type=doc["gpu_type"],
        gpu_num=doc["gpu_num"], zones=doc["zones"], gpu_sharing=share.sharing,
        mig_profile=share.resource.removeprefix(MIG_RESOURCE_PREFIX)
        if share.sharing == "mig" else None,
        time_slicing_replicas=share.weight.denominator if share.time_sliced else None,
        gpu_resource=share.resource, gpu_weight=str(share.weight), created_at=doc["created_at"],
    )  # fmt: skip


class Specs:
    def __init__(self, specs: SpecStore, stocks: StockStore) -> None:
        self._specs = specs
        self._stocks = stocks

    async def create(self, body: SpecCreate) -> Spec:
        share = body.share()
        doc: SpecDoc = {
            "_id": body.name, "name": body.name, "cpu": body.cpu, "memory": body.memory,
            "gpu_type": body.gpu_type, "gpu_num": body.gpu_num, "zones": body.zones,
            "created_at": now(), "gpu_resource": share.resource, "gpu_weight": str(share.weight),
        }  # fmt: skip
        if not await self._specs.insert(doc):
            raise Conflict(f"spec {body.name!r} already exists")
        return spec_view(doc)

    async def get(self, name: str) -> Spec:
        doc = await self._specs.get(name)
        if doc is None:
            raise NotFound(f"spec {name!r} does not exist")
        return spec_view(doc)

    async def list(self) -> list[Spec]:
        return [spec_view(doc) for doc in await self._specs.list()]

    async def delete(self, name: str) -> None:
        await self.get(name)
        stocked = {
            cluster: target
            for (cluster, spec_name), target in (await self._stocks.targets()).items()
            if spec_name == name and target > 0
        }
        if stocked:
            where = ", ".join(
                f"{target} in {cluster}" for cluster, target in sorted(stocked.items())
            )
            raise Conflict(
                f"spec {name!r} still has warm stocks ({where}); delete the stocks first"
            )
        await self._specs.delete(name)
