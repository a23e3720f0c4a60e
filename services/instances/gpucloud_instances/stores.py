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
        """How many live workloads a cluster runs: every live instance, job and
        inference service in the home cluster (workloads are placed in it alone so
        far), none elsewhere."""

        async def live_workloads(cluster: str) -> int:
            if cluster != settings.cluster_name:
                return 0
            instances, jobs, services = await asyncio.gather(
                self.instances.live_states(), self.jobs.live_keys(), self.services.keys()
            )
            return len(instances) + len(jobs) + len(services)

        return live_workloads
