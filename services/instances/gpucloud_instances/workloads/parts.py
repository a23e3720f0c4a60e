"""What the API part of every workload kind (instances, jobs, inference services) is
made with: made once by the app, handed to each kind."""

from __future__ import annotations

from dataclasses import dataclass

from ..clusters.placement import Placement
from ..queue.line import QueueLines
from ..specs.store import SpecStore
from ..storages import StorageClient
from ..store import RequestStore
from ..templates.catalog import ImagePolicy
from ..tenancy.store import TenantStore
from ..wakeups import ControllerWakeups


@dataclass(frozen=True)
class WorkloadParts:
    #: The catalog a workload's spec is read from.
    specs: SpecStore
    tenants: TenantStore
    #: Stops, starts and deletions asked of the controller.
    requests: RequestStore
    #: The storage service, asked whether the storages a workload mounts are the tenant's.
    storage: StorageClient
    wakeups: ControllerWakeups
    #: Each tenant's admission queue, for a queued workload's place.
    lines: QueueLines
    #: The registries images may come from.
    images: ImagePolicy
    #: Which cluster a new workload goes to.
    placement: Placement
