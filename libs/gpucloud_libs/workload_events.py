"""Event contracts of workloads (instances -> metering, storage, gateway): the
transitions of instances, jobs, their runs and service replicas, the three that hold
GPUs on one base (`GpuHoldingTransition`), so metering reads one shape. Part of the
union in events.py, which every producer and consumer imports."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AwareDatetime, Field

from .event_base import EventData
from .naming import DEFAULT_PROJECT, GPU_RESOURCE, service_workload_id

# --- instances (instances -> metering, gateway) -----------------------------------

#: An exact fraction of a GPU: `1`, `1/7`, `3/7`, `1/4`.
GpuWeight = Annotated[str, Field(pattern=r"^[1-9][0-9]{0,3}(/[1-9][0-9]{0,3})?$")]

InstanceState = Literal[
    "queued", "pending", "scheduled", "ready", "running", "stopping", "stopped", "failed", "deleted"
]


class GpuHoldingTransition(EventData):
    """A transition of what holds GPUs and is billed for them: an instance, one run of
    a job, one replica of an inference service. Metering reads this shape alone; each
    kind adds its own ids and states. `sequence` orders one workload's transitions."""

    tenant_id: str
    user_id: str | None = None
    #: The tenant's project it runs in (decision 138); `default` for one that names
    #: none, and for events from before projects.
    project: str = DEFAULT_PROJECT
    spec_name: str
    gpu_type: str
    gpu_count: int = Field(ge=0)
    #: The GPU kind its `gpu_count` units are, and one unit's part of a GPU (libs
    #: gpu_shares); whole GPUs when absent.
    gpu_resource: str = GPU_RESOURCE
    gpu_weight: GpuWeight = "1"
    zone: str | None = None
    node: str | None = None
    #: The cluster it runs in and that cluster's region (absent: recorded before
    #: clusters were, or the home cluster's workload of then).
    cluster: str | None = None
    region: str | None = None
    state: str
    sequence: int = Field(ge=0)
    at: AwareDatetime

    @property
    def workload_id(self) -> str:
        """What is billed, unique within the tenant: an instance id, `<job>/<run>`,
        or `svc--<service>/<replica>` (no instance id holds a `/` or a `--`). Not the
        quota's name of a job or a service (`naming.job_workload_id`): one job holds
        one claim, and each of its runs is billed."""
        raise NotImplementedError

    @property
    def of_job(self) -> str | None:
        """The job this is a run of."""
        return None

    @property
    def of_service(self) -> str | None:
        """The inference service this is a replica of."""
        return None


class InstanceStateChanged(GpuHoldingTransition):
    """One persisted lifecycle transition. Metering bills from these, so each is
    published exactly once per transition and `sequence` orders them per instance."""

    type: Literal["io.gpucloud.instance.state_changed.v1"] = "io.gpucloud.instance.state_changed.v1"
    instance_id: str
    state: InstanceState
    previous_state: InstanceState | None = None
    reason: str | None = None

    @property
    def aggregate_id(self) -> str:
        # Instance ids are unique per tenant (clients may choose them).
        return f"{self.tenant_id}/{self.instance_id}"

    @property
    def workload_id(self) -> str:
        return self.instance_id


# --- jobs (instances -> metering) --------------------------------------------------

#: `preempting`: its borrowed GPUs are taken back; it is `queued` again after.
JobState = Literal[
    "queued", "admitted", "running", "succeeded", "failed", "cancelled", "preempting"
]
#: A run is one pod of a job (an attempt, or one of its parallel pods). It holds its
#: GPUs from `scheduled` until it ends `succeeded` or `failed`.
JobRunState = Literal["scheduled", "running", "succeeded", "failed"]


class JobStateChanged(EventData):
    """One persisted transition of a batch job; `sequence` orders them per job."""

    type: Literal["io.gpucloud.job.state_changed.v1"] = "io.gpucloud.job.state_changed.v1"
    job_id: str
    tenant_id: str
    user_id: str | None = None
    spec_name: str
    state: JobState
    previous_state: JobState | None = None
    reason: str | None = None
    exit_code: int | None = None
    sequence: int = Field(ge=0)
    at: AwareDatetime

    @property
    def aggregate_id(self) -> str:
        return f"{self.tenant_id}/{self.job_id}"


class JobRunStateChanged(GpuHoldingTransition):
    """One transition of one run of a job. Metering bills runs as it bills instances:
    `sequence` orders a run's transitions, and the run holds `gpu_count` GPUs while
    `scheduled` or `running`."""

    type: Literal["io.gpucloud.job.run_state_changed.v1"] = "io.gpucloud.job.run_state_changed.v1"
    job_id: str
    #: Unique within the job: the suffix Kubernetes gave the run's pod.
    run_id: str
    state: JobRunState
    exit_code: int | None = None

    @property
    def aggregate_id(self) -> str:
        # The job's id: its runs' events stay in order with one another.
        return f"{self.tenant_id}/{self.job_id}"

    @property
    def workload_id(self) -> str:
        return f"{self.job_id}/{self.run_id}"

    @property
    def of_job(self) -> str:
        return self.job_id


ReplicaState = Literal["scheduled", "running", "ended"]


class ReplicaStateChanged(GpuHoldingTransition):
    """One transition of one replica of an inference service. Metering bills
    replicas as it bills instances: `sequence` orders a replica's transitions, and
    the replica holds `gpu_count` GPUs while `scheduled` or `running`."""

    type: Literal["io.gpucloud.inference.replica_state_changed.v1"] = (
        "io.gpucloud.inference.replica_state_changed.v1"
    )
    service_id: str
    #: Unique within the service: the suffix Kubernetes gave the replica's pod.
    replica_id: str
    #: The service's revision the replica runs.
    revision: int = Field(ge=1)
    state: ReplicaState

    @property
    def aggregate_id(self) -> str:
        # The service's id: its replicas' events stay in order with one another.
        return f"{self.tenant_id}/{self.service_id}"

    @property
    def workload_id(self) -> str:
        return f"{service_workload_id(self.service_id)}/{self.replica_id}"

    @property
    def of_service(self) -> str:
        return self.service_id


class InferenceServiceDeleted(EventData):
    """An inference service is gone, its last replica ended: what it was given (its
    storages' credentials) is revoked."""

    type: Literal["io.gpucloud.inference.service_deleted.v1"] = (
        "io.gpucloud.inference.service_deleted.v1"
    )
    service_id: str
    tenant_id: str
    at: AwareDatetime

    @property
    def aggregate_id(self) -> str:
        return f"{self.tenant_id}/{self.service_id}"


class StopTenantInstancesRequested(EventData):
    """Metering's hard budget stop asks the instances service to stop a tenant's instances."""

    type: Literal["io.gpucloud.instances.stop_requested.v1"] = (
        "io.gpucloud.instances.stop_requested.v1"
    )
    tenant_id: str
    reason: str

    @property
    def aggregate_id(self) -> str:
        return self.tenant_id


class UserSpendLimitReached(EventData):
    """Metering found a user's spend this month at their limit: the instances service
    stops the user's workloads and admits none of theirs until the month ends or the
    limit is raised above `limit_cents`."""

    type: Literal["io.gpucloud.instances.user_spend_limit_reached.v1"] = (
        "io.gpucloud.instances.user_spend_limit_reached.v1"
    )
    tenant_id: str
    user_id: str
    #: The calendar month, `YYYY-MM`.
    period: str
    limit_cents: int
    spent_cents: int

    @property
    def aggregate_id(self) -> str:
        return self.tenant_id


class ProjectBudgetReached(EventData):
    """Metering found a project's spend this month at its monthly budget (decision
    138): the instances service stops the project's workloads and admits none of its
    own until the month ends or the budget is raised above `limit_cents`."""

    type: Literal["io.gpucloud.instances.project_budget_reached.v1"] = (
        "io.gpucloud.instances.project_budget_reached.v1"
    )
    tenant_id: str
    project: str
    #: The calendar month, `YYYY-MM`.
    period: str
    limit_cents: int
    spent_cents: int

    @property
    def aggregate_id(self) -> str:
        return self.tenant_id
