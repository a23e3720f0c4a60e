"""Billing exactness over a test run: every ended workload billed exactly its recorded time.

For every tenant created at or after `--since` (those still listed by GET /v1/tenants,
and those the audit log shows created and since deleted, as a test run's teardown
deletes its tenants), each GPU instance, job run and inference replica that has ended
must satisfy, to the microsecond:

- billed + credited GPU time (metering's usage report, grouped by instance) equals
  the recorded end minus the recorded start, times its GPUs: for an instance, its
  history's stays in `scheduled`, `ready`, `running` and `stopping` (ledger.py's
  billable states; `queued` and `pending` are free); for a run or a replica, its
  `scheduledAt` to `endedAt`. Credited time (a quarantined node) is counted, not billed
  (on a shared GPU the report gives it only weighted and rounded down, so that part
  matches to within a GPU-µs; the billed part is exact, `sliceMicroseconds`);
- no billable interval starts before the workload's admission: an instance's first
  `pending` (a queued start is admitted later), the job admission a run belongs to
  (the latest `admitted` at or before its start), an inference service's creation.
  Both what the instances service recorded and what metering billed are checked.

It reads only, through the gateway, with a read-only platform-admin key it mints
from the bootstrap key and revokes at the end (its own rate-limit bucket, so a test
run using the bootstrap key meanwhile is not slowed). A failure of a workload that
ended less than `--settle` seconds before metering answered is checked again once
that long has passed: its last transition may still be on its way. Prints one line
per violation and a summary; exits 1 on a violation, 2 if it could not finish, 3 if it
checked fewer ended workloads than `--min-checked` (a run that found nothing to check
proves nothing).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import sys
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from typing import Any, Literal

import httpx

from .common import stack_env

#: The states that hold GPUs and are billed (services/metering/gpucloud_metering/ledger.py,
#: BILLABLE_STATES); written out again so the check does not lean on the code it checks.
BILLABLE = frozenset({"scheduled", "ready", "running", "stopping"})
INSTANCE_STATES = (
    "queued", "pending", "scheduled", "ready", "running", "stopping", "stopped", "failed",
    "deleted",
)  # fmt: skip
INSTANCE_ENDED = frozenset({"stopped", "failed", "deleted"})
#: Metering's workload ids: `<job>/<run>` and `svc--<service>/<replica>` (facts.py).
SERVICE_PREFIX = "svc--"
US_PER_S = 1_000_000
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: Waits before retrying a read the stack did not answer (it may be restarting).
BACKOFF_S = (2.0, 5.0, 15.0, 40.0)
#: Why a metered row no recorded workload claims is not checked.
DELETED_SERVICE = "replicas of services deleted before their runs were kept"
UNRECORDED = (
    "metered workloads the instances service never recorded (no start or end to compare: "
    "events published straight to Kafka, as tests/e2e/test_metering.py does)"
)
#: The scopes the minted key carries: tenants and audit, workloads, usage.
READ_SCOPES = ["admin:read", "instances:read", "billing:read"]

Kind = Literal["instance", "job run", "replica"]
Json = dict[str, Any]
#: [start, end) in µs; end None while the workload still holds its GPUs.
Span = tuple[int, int | None]


def to_us(text: str) -> int:
    """Microseconds since the epoch of an API timestamp, exactly (no float on the way)."""
    delta = datetime.fromisoformat(text).astimezone(UTC) - EPOCH
    return (delta.days * 86_400 + delta.seconds) * US_PER_S + delta.microseconds


def iso(us: int) -> str:
    return (EPOCH + timedelta(microseconds=us)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# --- what was recorded ----------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    """One billed thing as the instances service recorded it."""

    tenant_id: str
    kind: Kind
    #: As printed: an instance id, `<job>/<run>`, `<service>/<replica>`.
    name: str
    #: The row of metering's usage report grouped by instance.
    key: str
    spec_name: str
    gpus: int
    spans: tuple[Span, ...]
    #: The admission its GPU time may not start before; None if none was recorded.
    admitted_us: int | None
    #: When it ended (its last transition); None while it still runs.
    ended_us: int | None

    @property
    def recorded_unit_us(self) -> int:
        """Recorded end minus recorded start, times its GPUs (units, for shared GPUs)."""
        return sum((end - start) * self.gpus for start, end in self.spans if end is not None)

    def describe_spans(self) -> str:
        return ", ".join(f"{iso(start)} to {iso(end or 0)}" for start, end in self.spans) or "none"


def billable_spans(history: Iterable[tuple[str, int]]) -> tuple[Span, ...]:
    """Stays in billable states, contiguous ones merged: each from the transition into
    the first to the transition out of the last."""
    spans: list[Span] = []
    opened: int | None = None
    for state, at in history:
        if state in BILLABLE and opened is None:
            opened = at
        elif state not in BILLABLE and opened is not None:
            spans.append((opened, at))
            opened = None
    if opened is not None:
        spans.append((opened, None))
    return tuple(spans)


def instance_workload(tenant_id: str, doc: Json) -> Workload:
    history = [(entry["state"], to_us(entry["at"])) for entry in doc["history"]]
    admitted = next((at for state, at in history if state == "pending"), None)
    ended = history[-1][1] if history and history[-1][0] in INSTANCE_ENDED else None
    return Workload(
        tenant_id, "instance", doc["instanceID"], doc["instanceID"], doc["specName"],
        doc["gpuCount"], billable_spans(history), admitted, ended,
    )  # fmt: skip


def run_workloads(tenant_id: str, job: Json) -> list[Workload]:
    """Each run of a job; a run belongs to the latest admission of the job at or before
    its start (a preempted job is admitted again, and its new runs after that)."""
    admissions = sorted(to_us(e["at"]) for e in job["history"] if e["state"] == "admitted")
    workloads = []
    for run in job["runs"]:
        start = run.get("scheduledAt") or run.get("startedAt")
        ended = to_us(run["endedAt"]) if run.get("endedAt") else None
        spans: tuple[Span, ...] = ()
        if start is not None:
            spans = ((to_us(start), ended),)
        begin = spans[0][0] if spans else ended
        earlier = [at for at in admissions if begin is not None and at <= begin]
        admitted = earlier[-1] if earlier else (admissions[0] if admissions else None)
        name = f"{job['jobID']}/{run['runID']}"
        workloads.append(
            Workload(
                tenant_id,
                "job run",
                name,
                name,
                job["specName"],
                job["gpuCount"],
                spans,
                admitted,
                ended,
            )
        )
    return workloads


def replica_workloads(tenant_id: str, service_id: str, runs: list[Json]) -> list[Workload]:
    """Each replica a service of this name ran, its deleted uses' too: each run says its
    spec, its GPUs and when its service was created."""
    workloads = []
    for run in runs:
        ended = to_us(run["endedAt"]) if run.get("endedAt") else None
        spans: tuple[Span, ...] = ()
        if run.get("scheduledAt"):
            spans = ((to_us(run["scheduledAt"]), ended),)
        workloads.append(
            Workload(
                tenant_id,
                "replica",
                f"{service_id}/{run['replicaID']}",
                f"{SERVICE_PREFIX}{service_id}/{run['replicaID']}",
                run["specName"],
                run["gpuCount"],
                spans,
                to_us(run["serviceCreatedAt"]),
                ended,
            )
        )
    return workloads


# --- what was metered -----------------------------------------------------------------


@dataclass(frozen=True)
class Metered:
    """One row of the usage report: GPU-µs at the units' weight, each rounded down."""

    billed: int = 0
    credited: int = 0
    #: Billed units of a shared GPU, unweighted (exact); 0 for whole GPUs.
    slices: int = 0

    @property
    def anything(self) -> bool:
        return self.billed > 0 or self.credited > 0 or self.slices > 0


NOTHING = Metered()


def metered_rows(report: Json) -> dict[str, Metered]:
    return {
        row["key"]: Metered(
            row["gpuMicroseconds"],
            row.get("creditedGpuMicroseconds", 0),
            row.get("sliceMicroseconds", 0),
        )
        for row in report["rows"]
        if not row["key"].startswith("storage:")
    }


# --- the check ------------------------------------------------------------------------


class WeightUnknown(Exception):
    """A shared GPU's weight is needed, and its spec is gone."""


def total_difference(workload: Workload, row: Metered, weight: Fraction | None) -> str | None:
    """Why billed + credited is not the recorded time, or None when it is, exactly.

    A shared GPU's row counts units at their weight, billed and credited each rounded
    down once (tally.py); its billed units are there unweighted too (`slices`). A spec
    deleted since leaves the weight unknown: a row with slices is shared, one billed
    without slices is whole GPUs, and one only credited is whole GPUs if that fits."""
    recorded = workload.recorded_unit_us
    if weight is None:
        if row.slices == 0 and (row.billed > 0 or row.credited in (0, recorded)):
            weight = Fraction(1)
        elif row.slices > 0 and row.credited == 0:
            return None if row.slices == recorded else _units_text(workload, row, None)
        else:
            raise WeightUnknown(workload.spec_name)
    if weight == 1:
        if row.billed + row.credited == recorded:
            return None
        difference = row.billed + row.credited - recorded
        return (
            f"billed {row.billed} + credited {row.credited} = {row.billed + row.credited} "
            f"GPU-µs, recorded {recorded} GPU-µs ({workload.gpus} GPU x "
            f"{workload.describe_spans()}): {abs(difference)} GPU-µs "
            f"{'over' if difference > 0 else 'short'}"
        )
    credited_units = recorded - row.slices
    if (
        credited_units >= 0
        and math.floor(credited_units * weight) == row.credited
        and math.floor(row.slices * weight) == row.billed
    ):
        return None
    return _units_text(workload, row, weight)


def _units_text(workload: Workload, row: Metered, weight: Fraction | None) -> str:
    at = f" at weight {weight}" if weight is not None else ""
    return (
        f"billed {row.slices} unit-µs ({row.billed} GPU-µs{at}) + credited {row.credited} "
        f"GPU-µs, recorded {workload.recorded_unit_us} unit-µs ({workload.gpus} unit x "
        f"{workload.describe_spans()}): {workload.recorded_unit_us - row.slices} unit-µs "
        f"recorded but not billed"
    )


def record_difference(workload: Workload) -> str | None:
    """The instances service's own record: GPU time only after admission."""
    if not workload.spans:
        return None
    start = workload.spans[0][0]
    if workload.admitted_us is None:
        return f"holds GPUs from {iso(start)} but no admission is recorded"
    if start < workload.admitted_us:
        return (
            f"recorded start {iso(start)} is {workload.admitted_us - start} µs before its "
            f"admission at {iso(workload.admitted_us)}"
        )
    return None


def early_difference(workload: Workload, before: Metered) -> str | None:
    """Metering's side: nothing billed or credited before the admission."""
    if not before.anything:
        return None
    assert workload.admitted_us is not None
    return (
        f"billed {before.billed} + credited {before.credited} GPU-µs before its admission "
        f"at {iso(workload.admitted_us)} (recorded start "
        f"{iso(workload.spans[0][0]) if workload.spans else 'none'})"
    )


@dataclass(frozen=True)
class Violation:
    tenant_id: str
    kind: str
    name: str
    what: str

    def line(self) -> str:
        return f"VIOLATION tenant={self.tenant_id} {self.kind} {self.name}: {self.what}"


@dataclass
class TenantResult:
    tenant_id: str
    checked: Counter[str] = field(default_factory=Counter)
    #: Ended without holding a GPU, and nothing metered: checked, trivially.
    idle: int = 0
    running: Counter[str] = field(default_factory=Counter)
    #: Workloads and metered rows that could not be checked, by why.
    unchecked: Counter[str] = field(default_factory=Counter)
    violations: list[Violation] = field(default_factory=list)
    #: Lines about what could not be checked, printed before the violations.
    notes: list[str] = field(default_factory=list)
    #: Workloads that failed having ended within the settle time: metering may not
    #: have their last transition yet, so they are checked again once it is past.
    settling: Counter[str] = field(default_factory=Counter)
    #: The latest end among them (µs).
    settles_at_us: int = 0


# --- reading through the gateway ------------------------------------------------------


class ReadFailed(Exception):
    def __init__(self, path: str, status: int | None, detail: str) -> None:
        super().__init__(f"GET {path}: {status or 'no answer'} {detail}")
        self.status = status


class Gateway:
    """GETs through the gateway: at most `limit` at once, started at most `rate` a
    second (under the gateway's per-key limit, 50/s by default, so that few are
    refused); a 429 holds every call back as long as it asks, and a connection error
    or a 5xx is retried after BACKOFF_S (the stack may be restarting)."""

    def __init__(
        self, http: httpx.AsyncClient, headers: Mapping[str, str], *, limit: int, rate: float
    ) -> None:
        self._http = http
        self._headers = dict(headers)
        self._slots = asyncio.Semaphore(limit)
        self._interval_s = 1.0 / rate
        self._next_start = 0.0
        self.calls = 0
        self.refused = 0

    async def get(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        failures = 0
        while True:
            status, detail = await self._try(path, params)
            if status is not None and 200 <= status < 300:
                return detail
            if status == 429:
                continue
            if (status is not None and status < 500) or failures >= len(BACKOFF_S):
                raise ReadFailed(path, status, str(detail)[:300])
            await asyncio.sleep(BACKOFF_S[failures])
            failures += 1

    async def _try(self, path: str, params: Mapping[str, Any] | None) -> tuple[int | None, Any]:
        """(status or None, the JSON answer or why not)."""
        async with self._slots:
            await self._pace()
            self.calls += 1
            try:
                response = await self._http.get(path, params=params, headers=self._headers)
            except httpx.TransportError as error:
                return None, repr(error)
        if response.status_code == 429:
            self.refused += 1
            wait_s = float(response.headers.get("Retry-After", 1))
            self._next_start = max(self._next_start, time.monotonic() + wait_s)
        if response.is_success:
            return response.status_code, response.json()
        return response.status_code, response.text

    async def _pace(self) -> None:
        now = time.monotonic()
        start = max(now, self._next_start)
        self._next_start = start + self._interval_s
        if start > now:
            await asyncio.sleep(start - now)

    async def pages(self, path: str, params: Mapping[str, Any]) -> list[Json]:
        """Every item of a cursor-paged list."""
        items: list[Json] = []
        cursor: str | None = None
        while True:
            page = await self.get(path, {**params, **({"cursor": cursor} if cursor else {})})
            items.extend(page["items"])
            cursor = page.get("nextCursor")
            if not cursor:
                return items


async def listed_tenants(gateway: Gateway, since_us: int) -> set[str]:
    """Tenants GET /v1/tenants lists (not deleted) created at or after `since`."""
    found: set[str] = set()
    after: str | None = None
    while True:
        page = await gateway.get(
            "/v1/tenants", {"limit": 500, **({"after": after} if after else {})}
        )
        found.update(t["tenantID"] for t in page if to_us(t["createdAt"]) >= since_us)
        if len(page) < 500:
            return found
        after = page[-1]["tenantID"]


async def audited_tenants(gateway: Gateway, since_us: int) -> set[str]:
    """Tenants created at or after `since` by the audit log, deleted ones included."""
    entries = await gateway.pages("/v1/audit", {"since": iso(since_us), "limit": 500})
    return {
        entry["tenantID"]
        for entry in entries
        if entry["action"] == "POST /v1/tenants" and entry["result"] == 201 and entry["tenantID"]
    }


async def replica_runs(gateway: Gateway, tenant_id: str, service_id: str) -> list[Json] | str:
    """The replica runs of every use of a service name, deleted ones included, or why
    they cannot be read."""
    try:
        page = await gateway.get(
            f"/v1/inference-services/{service_id}/replicas", {"tenantID": tenant_id}
        )
    except ReadFailed as error:
        if error.status == 404:  # deleted before deleted services' runs were kept
            return DELETED_SERVICE
        raise
    runs: list[Json] = page["items"]
    return runs


@dataclass(frozen=True)
class TenantReading:
    tenant_id: str
    workloads: list[Workload]
    metered: dict[str, Metered]
    as_of_us: int
    #: Services by name, live or deleted: why their replicas could not be read, if not.
    services: dict[str, str | None]


async def read_tenant(gateway: Gateway, tenant_id: str, floor_us: int) -> TenantReading:
    scope = {"tenantID": tenant_id, "limit": 500}
    instances, jobs, services, report = await asyncio.gather(
        gateway.pages("/v1/gpu-instances", {**scope, "state": list(INSTANCE_STATES)}),
        gateway.pages("/v1/jobs", scope),
        gateway.pages("/v1/inference-services", scope),
        gateway.get(
            "/v1/usage", {"tenantID": tenant_id, "groupBy": "instance", "start": iso(floor_us)}
        ),
    )
    metered = metered_rows(report)
    # The services listed, and the deleted ones the usage names.
    names = sorted(
        {service["serviceID"] for service in services}
        | {key.removeprefix(SERVICE_PREFIX).split("/", 1)[0]
           for key in metered if key.startswith(SERVICE_PREFIX)}
    )  # fmt: skip
    runs = await asyncio.gather(*(replica_runs(gateway, tenant_id, name) for name in names))
    workloads = [instance_workload(tenant_id, doc) for doc in instances]
    for job in jobs:
        workloads.extend(run_workloads(tenant_id, job))
    read: dict[str, str | None] = {}
    for name, found in zip(names, runs, strict=True):
        read[name] = found if isinstance(found, str) else None
        if not isinstance(found, str):
            workloads.extend(replica_workloads(tenant_id, name, found))
    return TenantReading(tenant_id, workloads, metered, to_us(report["asOf"]), read)


async def metered_before(
    gateway: Gateway, tenant_id: str, floor_us: int, cutoffs: set[int]
) -> dict[int, dict[str, Metered]]:
    """The usage rows of [floor, cutoff) for each cutoff (an admission)."""

    async def one(cutoff: int) -> tuple[int, dict[str, Metered]]:
        params = {"tenantID": tenant_id, "groupBy": "instance", "start": iso(floor_us),
                  "end": iso(cutoff)}  # fmt: skip
        return cutoff, metered_rows(await gateway.get("/v1/usage", params))

    return dict(await asyncio.gather(*(one(c) for c in cutoffs if c > floor_us)))


# --- one tenant -----------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    floor_us: int
    settle_us: int
    weights: dict[str, Fraction]


def unmatched_row(reading: TenantReading, key: str, row: Metered) -> tuple[str, str | None]:
    """A metered row no recorded workload claims: why it is not checked, and a note to
    print for it, if any."""
    if key.startswith(SERVICE_PREFIX):
        service_id = key.removeprefix(SERVICE_PREFIX).split("/", 1)[0]
        if service_id not in reading.services:
            return DELETED_SERVICE, None
        if (why := reading.services[service_id]) is not None:
            return why, None
        kind = "replica"
    else:
        kind = "job run" if "/" in key else "instance"
    return UNRECORDED, (
        f"UNRECORDED tenant={reading.tenant_id} {kind} {key}: metered {row.billed} GPU-µs "
        f"billed + {row.credited} credited, and the instances service records no such {kind}"
    )


def check_tenant(
    reading: TenantReading,
    before: Mapping[int, Mapping[str, Metered]],
    settings: Settings,
    *,
    final: bool,
) -> TenantResult:
    """Every workload of one tenant against its usage; `final`: no more rechecks."""
    result = TenantResult(reading.tenant_id)
    claimed: set[str] = set()
    for workload in reading.workloads:
        claimed.add(workload.key)
        if workload.ended_us is None or any(end is None for _, end in workload.spans):
            result.running[workload.kind] += 1
            continue
        row = reading.metered.get(workload.key, NOTHING)
        try:
            problems = [
                problem
                for problem in (
                    total_difference(workload, row, settings.weights.get(workload.spec_name)),
                    record_difference(workload),
                    early_difference(
                        workload,
                        before.get(workload.admitted_us or 0, {}).get(workload.key, NOTHING),
                    ),
                )
                if problem is not None
            ]
        except WeightUnknown:
            result.unchecked["shared GPUs credited, spec (weight) deleted"] += 1
            continue
        if not problems:
            result.checked[workload.kind] += 1
            result.idle += workload.recorded_unit_us == 0
            continue
        violations = [
            Violation(reading.tenant_id, workload.kind, workload.name, what) for what in problems
        ]
        if not final and reading.as_of_us - workload.ended_us < settings.settle_us:
            result.settling[workload.kind] += 1
            result.settles_at_us = max(result.settles_at_us, workload.ended_us)
            continue
        result.checked[workload.kind] += 1
        result.violations.extend(violations)
    for key, row in sorted(reading.metered.items()):
        if key in claimed:
            continue
        why, note = unmatched_row(reading, key, row)
        result.unchecked[why] += 1
        if note is not None:
            result.notes.append(note)
    return result


def cutoffs_to_read(reading: TenantReading) -> set[int]:
    """The admissions whose preceding usage must be nothing: those of ended workloads
    that metering billed anything for (nothing billed cannot be billed early)."""
    return {
        workload.admitted_us
        for workload in reading.workloads
        if workload.admitted_us is not None
        and workload.ended_us is not None
        and reading.metered.get(workload.key, NOTHING).anything
    }


async def tenant_result(
    gateway: Gateway, tenant_id: str, settings: Settings, *, final: bool
) -> TenantResult:
    reading = await read_tenant(gateway, tenant_id, settings.floor_us)
    before = await metered_before(gateway, tenant_id, settings.floor_us, cutoffs_to_read(reading))
    return check_tenant(reading, before, settings, final=final)


# --- the run --------------------------------------------------------------------------


@dataclass
class Summary:
    tenants_listed: int = 0
    tenants_deleted: int = 0
    results: list[TenantResult] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    calls: int = 0
    refused: int = 0
    seconds: float = 0.0

    def counter(self, name: str) -> Counter[str]:
        total: Counter[str] = Counter()
        for result in self.results:
            total.update(getattr(result, name))
        return total

    @property
    def violations(self) -> list[Violation]:
        found = [v for r in self.results for v in r.violations]
        return sorted(found, key=lambda v: (v.tenant_id, v.kind, v.name))

    def lines(self) -> list[str]:
        checked, running = self.counter("checked"), self.counter("running")
        settling, unchecked = self.counter("settling"), self.counter("unchecked")
        lines = [
            f"tenants: {len(self.results)} read of {self.tenants_listed + self.tenants_deleted}"
            f" created since ({self.tenants_listed} listed, {self.tenants_deleted} deleted "
            f"since, found in the audit log); {self.calls} calls ({self.refused} refused by the "
            f"rate limit, retried) in {self.seconds:.1f} s",
            f"checked: {checked.total()} ended workloads ({_kinds(checked)}); "
            f"{sum(r.idle for r in self.results)} of them held no GPU and were billed nothing",
            f"skipped, still running: {running.total()} ({_kinds(running)})",
            f"skipped, metered nothing yet (ended within the settle time, not rechecked): "
            f"{settling.total()} ({_kinds(settling)})",
            f"not checkable: {unchecked.total()}"
            + "".join(f"\n  {n} {why}" for why, n in sorted(unchecked.items())),
            f"violations: {len(self.violations)}",
        ]
        return lines + [f"error: {error}" for error in self.errors]

    def below_floor(self, minimum: int) -> str | None:
        """Why the run proves too little: fewer ended workloads checked than `minimum`."""
        checked = self.counter("checked").total()
        if checked >= minimum:
            return None
        return (
            f"checked {checked} ended workloads, fewer than the floor of {minimum}: a run "
            "that finds nothing to check proves nothing (is --since right?)"
        )


def _kinds(counts: Counter[str]) -> str:
    return ", ".join(f"{counts[kind]} {kind}s" for kind in ("instance", "job run", "replica"))


async def tenant_results(
    gateway: Gateway, tenants: Iterable[str], settings: Settings, summary: Summary, *, final: bool
) -> list[TenantResult]:
    async def one(tenant_id: str) -> TenantResult | None:
        try:
            return await tenant_result(gateway, tenant_id, settings, final=final)
        except ReadFailed as error:
            summary.errors.append(f"tenant {tenant_id}: {error}")
            return None

    found = await asyncio.gather(*(one(t) for t in sorted(tenants)))
    return [result for result in found if result is not None]


async def check_everything(
    gateway: Gateway, since_us: int, settings: Settings, summary: Summary
) -> None:
    listed, audited = await asyncio.gather(
        listed_tenants(gateway, since_us), audited_tenants(gateway, since_us)
    )
    summary.tenants_listed, summary.tenants_deleted = len(listed), len(audited - listed)
    specs = await gateway.get("/v1/specs")
    settings.weights.update({s["name"]: Fraction(s["gpuWeight"]) for s in specs})
    results = await tenant_results(gateway, listed | audited, settings, summary, final=False)
    settling = [r for r in results if r.settling]
    if settling:
        # Wait until the latest of them ended `settle` ago by this clock (metering's is
        # the same machine's on the local stack), then read those tenants once more.
        latest = max(r.settles_at_us for r in settling)
        await asyncio.sleep(max(0.0, (latest + settings.settle_us) / US_PER_S - time.time()))
        again = await tenant_results(
            gateway, [r.tenant_id for r in settling], settings, summary, final=True
        )
        redone = {r.tenant_id for r in again}
        results = [r for r in results if r.tenant_id not in redone] + again
    summary.results = results


async def minted_key(http: httpx.AsyncClient, admin: Mapping[str, str]) -> tuple[str, str] | None:
    """A read-only platform-admin key of its own for this run, for an hour: (id, secret)."""
    expires = datetime.now(UTC) + timedelta(hours=1)
    body = {"name": "exactness check (read-only)", "scopes": READ_SCOPES,
            "expiresAt": expires.isoformat()}  # fmt: skip
    response = await http.post("/v1/api-keys", json=body, headers=dict(admin))
    if response.status_code != 201:
        print(f"could not mint a key ({response.status_code}); reading with the bootstrap key")
        return None
    created: Json = response.json()
    return created["keyID"], created["secret"]


def since_time(text: str) -> datetime:
    at = datetime.fromisoformat(text)
    if at.tzinfo is None:
        raise argparse.ArgumentTypeError("give a time zone, e.g. 2026-11-26T19:45:00Z")
    return at


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench exactness", description=(__doc__ or "").split("\n\n")[0]
    )
    p.add_argument(
        "--since",
        type=since_time,
        required=True,
        help="check tenants created at or after this ISO time (with a zone)",
    )
    p.add_argument("--timeout", type=float, default=600.0, help="give up after this many seconds")
    p.add_argument(
        "--min-checked",
        type=int,
        default=1,
        help="fail (exit 3) unless at least this many ended workloads were checked",
    )
    p.add_argument("--concurrency", type=int, default=8, help="calls in flight at once")
    p.add_argument("--rate", type=float, default=40.0, help="calls started per second at most")
    p.add_argument(
        "--settle",
        type=float,
        default=30.0,
        help="a failure of a workload ended this recently is checked again this long after "
        "its end (metering may not have its last transition yet)",
    )
    return p


async def main(args: argparse.Namespace) -> None:
    env = os.environ if "GPUCLOUD_BOOTSTRAP_ADMIN_KEY" in os.environ else stack_env()
    admin = {"Authorization": f"Bearer {env['GPUCLOUD_BOOTSTRAP_ADMIN_KEY']}"}
    since_us = to_us(args.since.isoformat())
    # A day before `since`: no workload of a tenant made since can bill earlier.
    settings = Settings(since_us - 86_400 * US_PER_S, int(args.settle * US_PER_S), {})
    summary = Summary()
    started = time.perf_counter()
    async with httpx.AsyncClient(base_url=env["GPUCLOUD_GATEWAY_URL"], timeout=60) as http:
        key = await minted_key(http, admin)
        headers = {"Authorization": f"Bearer {key[1]}"} if key else admin
        gateway = Gateway(http, headers, limit=args.concurrency, rate=args.rate)
        try:
            async with asyncio.timeout(args.timeout):
                await check_everything(gateway, since_us, settings, summary)
        except TimeoutError:
            summary.errors.append(
                f"timed out after {args.timeout:.0f} s; nothing reported is final"
            )
        except ReadFailed as error:
            summary.errors.append(str(error))
        finally:
            if key:
                await http.delete(f"/v1/api-keys/{key[0]}", headers=admin)
        summary.calls, summary.refused = gateway.calls, gateway.refused
        summary.seconds = time.perf_counter() - started
    for note in sorted(n for r in summary.results for n in r.notes):
        print(note)
    for violation in summary.violations:
        print(violation.line())
    print("\n".join(summary.lines()))
    sys.stdout.flush()
    floor = summary.below_floor(args.min_checked)
    if floor is not None:
        print(f"floor: {floor}")
    if summary.violations:
        raise SystemExit(1)
    if summary.errors:
        raise SystemExit(2)
    if floor is not None:
        raise SystemExit(3)
