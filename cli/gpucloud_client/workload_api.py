"""The client's calls on workloads: instances, batch jobs and inference services."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from websockets.sync.client import ClientConnection

from . import tunnel
from .api_session import ApiSession, _id, _items
from .models import (
    Instance,
    Job,
)

#: Instance states a wait ends in when nothing else is asked for.
SETTLED_INSTANCE_STATES = {"running", "stopped", "failed", "deleted"}
#: Where a stop ends: an instance answers a stop while still `running`.
STOPPED_INSTANCE_STATES = {"stopped", "failed", "deleted"}
ENDED_JOB_STATES = {"succeeded", "failed", "cancelled"}


class WorkloadApi(ApiSession):
    # --- inference services ------------------------------------------------------------

    def list_services(self, *, project: str | None = None) -> Iterator[dict[str, Any]]:
        return self.pages("/inference-services", {"project": project, "limit": 200})

    def get_service(self, service_id: str) -> dict[str, Any]:
        return cast(dict[str, Any], self.request("GET", f"/inference-services/{_id(service_id)}"))

    def create_service(self, body: dict[str, Any]) -> dict[str, Any]:
        return cast(dict[str, Any], self.request("POST", "/inference-services", json=body))

    def update_service(self, service_id: str, changes: dict[str, Any]) -> dict[str, Any]:
        path = f"/inference-services/{_id(service_id)}"
        return cast(dict[str, Any], self.request("PATCH", path, json=changes))

    def rollback_service(self, service_id: str, revision: int) -> dict[str, Any]:
        """A new revision made from `revision`'s template."""
        path = f"/inference-services/{_id(service_id)}/rollback"
        return cast(dict[str, Any], self.request("POST", path, json={"revision": revision}))

    def delete_service(self, service_id: str) -> dict[str, Any]:
        path = f"/inference-services/{_id(service_id)}"
        return cast(dict[str, Any], self.request("DELETE", path))

    def service_replicas(self, service_id: str) -> list[dict[str, Any]]:
        path = f"/inference-services/{_id(service_id)}/replicas"
        return _items(self.request("GET", path))

    def workload_metrics(self, kind: str, workload_id: str, minutes: int) -> dict[str, Any]:
        """A workload's GPUs over the last `minutes`, a point a minute. `kind` is the
        collection: gpu-instances, jobs or inference-services."""
        start = datetime.now(UTC) - timedelta(minutes=minutes)
        params = {"start": start.isoformat(), "resolution": "1m"}
        path = f"/{kind}/{_id(workload_id)}/metrics"
        return cast(dict[str, Any], self.request("GET", path, params=params))

    # --- instances ---------------------------------------------------------------------

    def list_instances(
        self, *, states: list[str] | None = None, project: str | None = None
    ) -> Iterator[Instance]:
        return self.pages("/gpu-instances", {"state": states, "project": project, "limit": 200})

    def get_instance(self, instance_id: str) -> Instance:
        return cast(Instance, self.request("GET", f"/gpu-instances/{_id(instance_id)}"))

    def create_instance(
        self, body: dict[str, Any], *, idempotency_key: str | None = None
    ) -> Instance:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        return cast(Instance, self.request("POST", "/gpu-instances", json=body, headers=headers))

    def stop_instance(self, instance_id: str) -> Instance:
        """Stop a live instance; one already stopping, stopped or failed is left as is."""
        return cast(Instance, self.request("POST", f"/gpu-instances/{_id(instance_id)}/stop"))

    def start_instance(self, instance_id: str) -> Instance:
        """Start a stopped or failed instance again; one starting or running is left as is."""
        return cast(Instance, self.request("POST", f"/gpu-instances/{_id(instance_id)}/start"))

    def delete_instance(self, instance_id: str) -> Instance:
        """Delete the record of a stopped or failed instance (a live one is stopped)."""
        return cast(Instance, self.request("DELETE", f"/gpu-instances/{_id(instance_id)}"))

    def wait_for_instance(
        self,
        instance_id: str,
        *,
        until: set[str] = SETTLED_INSTANCE_STATES,
        timeout_s: float = 600.0,
        on_change: Callable[[Instance], None] | None = None,
        after_revision: int | None = None,
        given_up: Callable[[Instance], bool] | None = None,
    ) -> Instance:
        """Long-poll the instance's transitions until it reaches one of `until` (after
        `after_revision`, when given: a state it left and may come back to), or
        `given_up` says it never will; raises TimeoutError past `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        instance = self.get_instance(instance_id)
        while instance["state"] not in until or instance["revision"] <= (after_revision or -1):
            if given_up is not None and given_up(instance):
                break
            if on_change:
                on_change(instance)
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"instance {instance_id} is still {instance['state']}")
            instance = cast(Instance, self.request(
                "GET", f"/gpu-instances/{_id(instance_id)}",
                params={"afterRevision": instance["revision"], "waitSeconds": min(left, 25)},
                timeout_s=40,
            ))  # fmt: skip
        if on_change:
            on_change(instance)
        return instance

    def open_tunnel(self, instance_id: str, port: int) -> ClientConnection:
        """A TCP tunnel to a declared port of a running instance (see tunnel.relay)."""
        return tunnel.open_tunnel(self.endpoint, self._credential, instance_id, port)

    def open_instance_session(self, instance_id: str, port: int) -> dict[str, Any]:
        """A one-minute link that opens the instance's URL on `port` in a browser."""
        path = f"/gpu-instances/{_id(instance_id)}/ports/{port}/session"
        return cast(dict[str, Any], self.request("POST", path))

    # --- jobs --------------------------------------------------------------------------

    def list_jobs(
        self, *, states: list[str] | None = None, project: str | None = None
    ) -> Iterator[Job]:
        return self.pages("/jobs", {"state": states, "project": project, "limit": 200})

    def get_job(self, job_id: str) -> Job:
        return cast(Job, self.request("GET", f"/jobs/{_id(job_id)}"))

    def submit_job(self, body: dict[str, Any], *, idempotency_key: str | None = None) -> Job:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        return cast(Job, self.request("POST", "/jobs", json=body, headers=headers))

    def cancel_job(self, job_id: str) -> Job:
        return cast(Job, self.request("DELETE", f"/jobs/{_id(job_id)}"))

    @contextmanager
    def job_log(
        self, job_id: str, *, run: str | None = None, follow: bool = False,
        tail_lines: int | None = None,
    ) -> Iterator[Iterator[str]]:  # fmt: skip
        """A run's log as text chunks; with `follow`, until the run ends."""
        params = {"run": run, "follow": "true" if follow else None, "tailLines": tail_lines}
        with self.stream(f"/jobs/{_id(job_id)}/logs", params=params) as response:
            yield response.iter_text()

    @contextmanager
    def instance_log(
        self, instance_id: str, *, follow: bool = False, tail_lines: int | None = None
    ) -> Iterator[Iterator[str]]:
        """The instance's log as text chunks; with `follow`, until it ends."""
        params = {"follow": "true" if follow else None, "tailLines": tail_lines}
        with self.stream(f"/gpu-instances/{_id(instance_id)}/logs", params=params) as response:
            yield response.iter_text()
