"""The API's resources as the client returns them: JSON objects with the API's own
(camelCase) field names, typed for readers and for mypy."""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict


class Transition(TypedDict):
    state: str
    at: str
    reason: NotRequired[str | None]


class Identity(TypedDict):
    subject: str
    userID: str | None
    keyID: str | None
    role: str
    tenantID: str | None
    scopes: list[str]
    via: str


class User(TypedDict):
    userID: str
    email: str
    name: str
    role: str
    status: str


class QueuePosition(TypedDict):
    position: int
    reason: str
    gpusAhead: int


class Instance(TypedDict):
    instanceID: str
    tenantID: str
    state: str
    reason: str | None
    message: str | None
    specName: str
    gpuType: str
    gpuCount: int
    image: str
    #: The cluster it was placed in (absent from a server before clusters).
    cluster: NotRequired[str]
    zone: str | None
    node: str | None
    fromStock: bool
    #: While queued: its place in the tenant's admission queue.
    queue: QueuePosition | None
    priority: int
    stopRequested: bool
    #: A start asked of it (stopped or failed) is still to be carried out.
    startRequested: NotRequired[bool]
    revision: int
    urls: list[str]
    createdAt: str
    updatedAt: str
    history: list[Transition]


class JobRun(TypedDict):
    runID: str
    state: str
    node: str | None
    exitCode: int | None
    scheduledAt: str | None
    startedAt: str | None
    endedAt: str | None


class Job(TypedDict):
    jobID: str
    tenantID: str
    state: str
    reason: str | None
    message: str | None
    exitCode: int | None
    queue: QueuePosition | None
    specName: str
    gpuType: str
    gpuCount: int
    image: str
    cluster: NotRequired[str]
    command: NotRequired[list[str] | None]
    args: NotRequired[list[str] | None]
    parallelism: int
    completions: int
    #: A multi-node job's pods, one per node (a JobSet); None for any other job.
    nodes: NotRequired[int | None]
    retryLimit: int
    priority: int
    cancelRequested: bool
    succeededRuns: int
    failedRuns: int
    runs: list[JobRun]
    revision: int
    createdAt: str
    updatedAt: str
    history: list[Transition]


class Storage(TypedDict):
    storageID: str
    tenantID: str
    name: str | None
    kind: str
    state: str
    message: str | None
    sizeBytes: int
    usedBytes: int | None
    bucket: str | None
    endpoint: str | None
    attachedTo: list[str]
    createdAt: str
    updatedAt: str


class ObjectEntry(TypedDict):
    key: str
    sizeBytes: int
    etag: str
    lastModified: str | None


class ObjectListing(TypedDict):
    objects: list[ObjectEntry]
    prefixes: list[str]
    nextCursor: str | None


class PartUrl(TypedDict):
    partNumber: int
    url: str


class UploadPlan(TypedDict):
    key: str
    expiresAt: str
    url: str | None
    uploadID: str | None
    partSizeBytes: int | None
    parts: list[PartUrl]


class PartUrls(TypedDict):
    key: str
    uploadID: str
    expiresAt: str
    parts: list[PartUrl]


class PresignedUrl(TypedDict):
    method: str
    url: str
    expiresAt: str


class UsageRow(TypedDict):
    key: str
    gpuMicroseconds: int
    gpuSeconds: float
    creditedGpuMicroseconds: int
    #: Time on shared-GPU units (MIG slices, replicas), unweighted.
    sliceMicroseconds: NotRequired[int]
    storageGbHours: str
    amount: str


class UsageReport(TypedDict):
    tenantID: str | None
    start: str
    end: str
    groupBy: str
    rows: list[UsageRow]
    total: UsageRow
    asOf: str


class Alert(TypedDict):
    alertID: str
    ruleID: str
    state: str
    severity: str
    subject: str
    node: str
    instanceID: str | None
    metric: str
    comparison: str
    threshold: float
    value: float
    firedAt: str
    resolvedAt: str | None


class Node(TypedDict):
    node: str
    zone: str | None
    gpuType: str | None
    gpus: int
    tiers: list[str]
    health: str
    healthReasons: list[str]
    healthSince: str | None
    gpusInUse: int
    utilizationGpuPct: float | None
    telemetry: str | None


class Tenant(TypedDict):
    tenantID: str
    name: str
    status: str
    limits: dict[str, Any]
    quota: dict[str, Any]
    createdAt: str
