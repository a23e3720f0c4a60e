"""Every store of the instances service, opened once."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from gpucloud_libs.mongo import Database

from .clusters.store import ClusterStore
from .inference.store import ServiceStore
from .instances.store import InstanceStore
from .jobs.store import JobStore
from .queue.store import QueueLineStore
from .quota_ledger import QuotaLedger
from .registry.store import RegistryCredentialStore
from .settings import InstancesSettings
from .specs.store import SpecStore
from .stocks.store import StockStore
from .store import RequestStore
from .tenancy.store import TenantStore


@dataclass(frozen=True)
class Stores:
    """The service's collections, each behind its store: opened once by the app, and
    handed to the controller and the API's parts."""

    specs: SpecStore
    tenants: TenantStore
    instances: InstanceStore
    stocks: StockStore
    requests: RequestStore
    quota: QuotaLedger
    jobs: JobStore
    services: ServiceStore
    lines: QueueLineStore
    registry_credentials: RegistryCredentialStore
    clusters: ClusterStore

    @classmethod
    def of(cls, db: Database, settings: InstancesSettings) -> Stores:
        return cls(
            specs=SpecStore(db), tenants=TenantStore(db), instances=InstanceStore(db, complete_cache=settings.lists_from_memory),
            stocks=StockStore(db, home=settings.cluster_name), requests=RequestStore(db), quota=QuotaLedger(db),
            jobs=JobStore(db), services=ServiceStore(db), lines=QueueLineStore(db),
            registry_credentials=RegistryCredentialStore(db), clusters=ClusterStore(db),
        )  # fmt: skip

    def use_of_clusters(self, settings: InstancesSettings) -> StoredClusterUse:
        return StoredClusterUse(self, settings.cluster_name)


class StoredClusterUse:
    """What each cluster holds, as the stores record it (clusters/service.py)."""

    def __init__(self, stores: Stores, home: str) -> None:
        self._stores = stores
        self._home = home

    async def workloads(self, cluster: str) -> int:
        """Live instances, jobs and inference services, by the cluster each records
        (none recorded: the home cluster)."""
        stores = self._stores
        instances, jobs, services = await asyncio.gather(
            stores.instances.live_clusters(),
            stores.jobs.live_clusters(),
            stores.services.clusters(),
        )
        placed = [name or self._home for name in (*instances, *jobs, *services)]
        return placed.count(cluster)

    async def stocked_units(self, cluster: str) -> int:
        """Its stocks' targets, or the units still there when those are smaller (a
        stock just removed whose hold pods have not gone yet)."""
        targets = await self._stores.stocks.targets()
        wanted = sum(target for (kept_in, _), target in targets.items() if kept_in == cluster)
        return max(wanted, len(await self._stores.stocks.units(cluster)))
