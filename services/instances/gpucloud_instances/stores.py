"""Every store of the instances service, opened once."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from gpucloud_libs.mongo import Database

from .clusters.service import LiveWorkloads
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
            stocks=StockStore(db), requests=RequestStore(db), quota=QuotaLedger(db),
            jobs=JobStore(db), services=ServiceStore(db), lines=QueueLineStore(db),
            registry_credentials=RegistryCredentialStore(db), clusters=ClusterStore(db),
        )  # fmt: skip

    def live_workloads_of(self, settings: InstancesSettings) -> LiveWorkloads:
        """How many live workloads (instances, jobs, inference services) a cluster
        runs, by the cluster each records (none recorded: the home cluster)."""

        async def live_workloads(cluster: str) -> int:
            instances, jobs, services = await asyncio.gather(
                self.instances.live_clusters(), self.jobs.live_clusters(), self.services.clusters()
            )
            placed = [name or settings.cluster_name for name in (*instances, *jobs, *services)]
            return placed.count(cluster)

        return live_workloads
