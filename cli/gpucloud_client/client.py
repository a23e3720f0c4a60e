"""The typed client of the gpucloud API: one authenticated HTTP session, a method per
operation, problems raised as `ApiError`.

    from gpucloud_client import Client

    with Client("https://gpu.example.com", api_key) as cloud:
        instance = cloud.create_instance({"image": "jupyter/base-notebook", "specName": "h100-1"})
        instance = cloud.wait_for_instance(instance["instanceID"], until={"running"})
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import httpx
from websockets.sync.client import ClientConnection

from . import tunnel
from .errors import ApiError, Unreachable
from .models import (
    Alert,
    Identity,
    Instance,
    Job,
    Node,
    ObjectListing,
    PartUrls,
    PresignedUrl,
    Storage,
    Tenant,
    UploadPlan,
    UsageReport,
    User,
)

#: Refusals that say "try again shortly": the rate limiter, and a tenant the services
#: have not heard of yet (it reaches them by event, a moment after its creation).
RETRYABLE = {(429, "rate_limited"), (409, "tenant_not_ready")}
#: How long a call keeps retrying those before it gives up and raises.
RETRY_FOR_S = 30.0
#: Instance states a wait ends in when nothing else is asked for.
SETTLED_INSTANCE_STATES = {"running", "stopped", "failed", "deleted"}
#: Where a stop ends: an instance answers a stop while still `running`.
STOPPED_INSTANCE_STATES = {"stopped", "failed", "deleted"}
ENDED_JOB_STATES = {"succeeded", "failed", "cancelled"}

Params = dict[str, Any]


class Client:
    """One endpoint and one credential (an API key or a session token)."""

    def __init__(
        self,
        endpoint: str,
        api_key: str,
        *,
        timeout_s: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.endpoint = endpoint.rstrip("/")
        self._credential = api_key
        self._http = httpx.Client(
            base_url=f"{self.endpoint}/v1",
            headers={"Authorization": f"Bearer {api_key}", "User-Agent": "gpucloud-cli/0.1"},
            timeout=httpx.Timeout(timeout_s, connect=10.0),
            transport=transport,
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # --- the HTTP session --------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Params | None = None,
        headers: dict[str, str] | None = None,
        timeout_s: float | None = None,
    ) -> Any:
        """One call; the decoded JSON answer (None for 204). Retries what the API asks to
        be retried (`Retry-After`), up to RETRY_FOR_S."""
        response = self._send(method, path, json=json, params=params, headers=headers,
                              timeout_s=timeout_s)  # fmt: skip
        if response.status_code == 204 or not response.content:
            return None
        return response.json()

    def _send(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Params | None = None,
        headers: dict[str, str] | None = None,
        timeout_s: float | None = None,
    ) -> httpx.Response:
        deadline = time.monotonic() + RETRY_FOR_S
        while True:
            try:
                response = self._http.request(
                    method, path, json=json, params=_clean(params), headers=headers,
                    timeout=timeout_s if timeout_s is not None else httpx.USE_CLIENT_DEFAULT,
                )  # fmt: skip
            except httpx.TransportError as error:
                raise Unreachable(f"{self.endpoint}: {error or type(error).__name__}") from error
            if response.is_success:
                return response
            problem = _problem(response)
            wait_s = _retry_after(response)
            if (
                problem.status,
                problem.code,
            ) not in RETRYABLE or time.monotonic() + wait_s > deadline:
                raise problem
            time.sleep(wait_s)

    @contextmanager
    def stream(self, path: str, *, params: Params | None = None) -> Iterator[httpx.Response]:
        """A streamed GET (a log that grows): the response, to read with `iter_text`."""
        # A followed log may stay quiet for long: only the connect is bounded.
        timeout = httpx.Timeout(None, connect=10.0)
        request = self._http.build_request("GET", path, params=_clean(params), timeout=timeout)
        try:
            response = self._http.send(request, stream=True)
        except httpx.TransportError as error:
            raise Unreachable(f"{self.endpoint}: {error or type(error).__name__}") from error
        try:
            if not response.is_success:
                response.read()
                raise _problem(response)
            yield response
        finally:
            response.close()

    def pages(self, path: str, params: Params | None = None) -> Iterator[Any]:
        """Every item of a cursor-paged list (`items`, `nextCursor`)."""
        cursor: str | None = None
        while True:
            page = self.request("GET", path, params={**(params or {}), "cursor": cursor})
            yield from page["items"]
            cursor = page.get("nextCursor")
            if not cursor:
                return

    def pages_after(self, path: str, id_field: str, limit: int) -> Iterator[Any]:
        """Every item of a list paged by `after` (the last id seen) rather than a cursor:
        a page shorter than `limit` is the last."""
        after: str | None = None
        while True:
            page = self.request("GET", path, params={"after": after, "limit": limit})
            yield from page
            if len(page) < limit:
                return
            after = page[-1][id_field]

    # --- identity ----------------------------------------------------------------------

    def whoami(self) -> Identity:
        return cast(Identity, self.request("GET", "/whoami"))

    def list_users(self, *, tenant: str | None = None) -> Iterator[User]:
        """The caller's tenant's users (an admin's call), or with `tenant` that tenant's
        (a platform admin's)."""
        path = "/users" if tenant is None else f"/tenants/{_id(tenant)}/users"
        return self.pages_after(path, "userID", 500)

    def add_user(self, body: dict[str, Any], *, tenant: str | None = None) -> User:
        """A user of the caller's tenant, or with `tenant` of that one (a platform admin's)."""
        path = "/users" if tenant is None else f"/tenants/{_id(tenant)}/users"
        return cast(User, self.request("POST", path, json=body))

    def revoke_key(self, key_id: str) -> None:
        """Revoke an API key on the server: it stops working at once."""
        self.request("DELETE", f"/api-keys/{_id(key_id)}")

    # --- the catalog: specs, prices, templates --------------------------------------------

    def list_specs(self) -> list[dict[str, Any]]:
        return _items(self.request("GET", "/specs"))

    def list_prices(self) -> list[dict[str, Any]]:
        return _items(self.request("GET", "/prices"))

    def quota(self) -> dict[str, Any]:
        return cast(dict[str, Any], self.request("GET", "/quota"))

    # --- the operator's catalog and customers --------------------------------------------

    def create_spec(self, body: dict[str, Any]) -> dict[str, Any]:
        return cast(dict[str, Any], self.request("POST", "/specs", json=body))

    def delete_spec(self, name: str) -> None:
        self.request("DELETE", f"/specs/{_id(name)}")

    def set_price(self, body: dict[str, Any]) -> dict[str, Any]:
        return cast(dict[str, Any], self.request("POST", "/prices", json=body))

    def withdraw_price(self, price_id: str) -> None:
        self.request("DELETE", f"/prices/{_id(price_id)}")

    def create_tenant(self, body: dict[str, Any]) -> dict[str, Any]:
        """The tenant, its first admin and that admin's API key (shown this once)."""
        return cast(dict[str, Any], self.request("POST", "/tenants", json=body))

    def list_templates(self) -> list[dict[str, Any]]:
        return _items(self.request("GET", "/templates"))

    def get_template(self, template_id: str) -> dict[str, Any]:
        return cast(dict[str, Any], self.request("GET", f"/templates/{_id(template_id)}"))

    # --- inference services ------------------------------------------------------------

    def list_services(self) -> Iterator[dict[str, Any]]:
        return self.pages("/inference-services", {"limit": 200})

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

    def list_instances(self, *, states: list[str] | None = None) -> Iterator[Instance]:
        return self.pages("/gpu-instances", {"state": states, "limit": 200})

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
    ) -> Instance:
        """Long-poll the instance's transitions until it reaches one of `until` (after
        `after_revision`, when given: a state it left and may come back to); raises
        TimeoutError past `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        instance = self.get_instance(instance_id)
        while instance["state"] not in until or instance["revision"] <= (after_revision or -1):
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

    def list_jobs(self, *, states: list[str] | None = None) -> Iterator[Job]:
        return self.pages("/jobs", {"state": states, "limit": 200})

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

    # --- storages ----------------------------------------------------------------------

    def list_storages(self) -> Iterator[Storage]:
        return self.pages("/storages", {"limit": 200})

    def get_storage(self, storage_id: str) -> Storage:
        return cast(Storage, self.request("GET", f"/storages/{_id(storage_id)}"))

    def create_storage(self, body: dict[str, Any]) -> Storage:
        return cast(Storage, self.request("POST", "/storages", json=body))

    def delete_storage(self, storage_id: str, *, force: bool = False) -> None:
        params = {"force": "true" if force else None}
        self.request("DELETE", f"/storages/{_id(storage_id)}", params=params)

    def create_accessor(self, storage_id: str, mode: str) -> dict[str, Any]:
        path = f"/storages/{_id(storage_id)}/accessors"
        return cast(dict[str, Any], self.request("POST", path, json={"mode": mode}))

    def list_objects(
        self, storage_id: str, *, prefix: str = "", delimiter: str = "",
        cursor: str | None = None, limit: int = 1000,
    ) -> ObjectListing:  # fmt: skip
        params = {"prefix": prefix, "delimiter": delimiter, "cursor": cursor, "limit": limit}
        path = f"/storages/{_id(storage_id)}/objects"
        return cast(ObjectListing, self.request("GET", path, params=params))

    def plan_upload(self, storage_id: str, key: str, size_bytes: int) -> UploadPlan:
        path = f"/storages/{_id(storage_id)}/uploads"
        body = {"key": key, "sizeBytes": size_bytes}
        return cast(UploadPlan, self.request("POST", path, json=body))

    def presign_parts(self, storage_id: str, upload_id: str, numbers: list[int]) -> PartUrls:
        path = f"/storages/{_id(storage_id)}/uploads/{_id(upload_id)}/parts"
        return cast(PartUrls, self.request("POST", path, json={"partNumbers": numbers}))

    def complete_upload(
        self, storage_id: str, upload_id: str, etags: dict[int, str]
    ) -> dict[str, Any]:
        path = f"/storages/{_id(storage_id)}/uploads/{_id(upload_id)}/complete"
        parts = [{"partNumber": n, "etag": etags[n]} for n in sorted(etags)]
        return cast(dict[str, Any], self.request("POST", path, json={"parts": parts}))

    def presign_uploads(self, storage_id: str, objects: list[tuple[str, int]]) -> dict[str, str]:
        """Single-PUT URLs for up to 1,000 small objects, (key, size) each: key → URL."""
        path = f"/storages/{_id(storage_id)}/upload-urls"
        body = {"objects": [{"key": key, "sizeBytes": size} for key, size in objects]}
        return {u["key"]: u["url"] for u in self.request("POST", path, json=body)["urls"]}

    def presign_downloads(self, storage_id: str, keys: list[str]) -> dict[str, str]:
        """GET URLs for up to 1,000 objects: key → URL."""
        path = f"/storages/{_id(storage_id)}/download-urls"
        return {u["key"]: u["url"] for u in self.request("POST", path, json={"keys": keys})["urls"]}

    def presign_download(self, storage_id: str, key: str) -> PresignedUrl:
        path = f"/storages/{_id(storage_id)}/downloads"
        return cast(PresignedUrl, self.request("POST", path, json={"key": key}))

    # --- usage, alerts, fleet, tenants -------------------------------------------------

    def usage(
        self,
        *,
        group_by: str = "instance",
        start: str | None = None,
        end: str | None = None,
        mine: bool = False,
    ) -> UsageReport:
        """The tenant's usage, or with `mine` the caller's own (what they started)."""
        params = {"groupBy": group_by, "start": start, "end": end}
        path = "/usage/mine" if mine else "/usage"
        return cast(UsageReport, self.request("GET", path, params=params))

    def list_alerts(self, *, state: str | None = None, rule: str | None = None) -> list[Alert]:
        params = {"state": state, "ruleID": rule}
        return cast(list[Alert], self.request("GET", "/alerts", params=params))

    def capacity(self) -> list[dict[str, Any]]:
        """Free GPUs by zone and type, node by node (anyone may read it)."""
        return cast(list[dict[str, Any]], self.request("GET", "/capacity"))

    def list_nodes(self) -> list[Node]:
        return cast(list[Node], self.request("GET", "/nodes"))

    def release_node(self, node: str) -> Node:
        return cast(Node, self.request("POST", f"/nodes/{_id(node)}/release"))

    def quarantine_node(self, node: str, reason: str) -> Node:
        path = f"/nodes/{_id(node)}/quarantine"
        return cast(Node, self.request("POST", path, json={"reason": reason}))

    def list_tenants(self) -> Iterator[Tenant]:
        return self.pages_after("/tenants", "tenantID", 100)

    def get_tenant(self, tenant_id: str) -> Tenant:
        return cast(Tenant, self.request("GET", f"/tenants/{_id(tenant_id)}"))


def _id(value: str) -> str:
    """A path segment: ids never hold a slash, so one that does is refused here rather
    than sent to another route."""
    if not value or "/" in value or value in {".", ".."}:
        raise ValueError(f"not an id: {value!r}")
    return value


def _items(answer: Any) -> list[dict[str, Any]]:
    """A list answer's items, whether the API sends a bare list or a page."""
    return list(answer["items"] if isinstance(answer, dict) else answer)


def _clean(params: Params | None) -> Params | None:
    return {k: v for k, v in params.items() if v is not None} if params else None


def _problem(response: httpx.Response) -> ApiError:
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        body = {"detail": response.text[:500]}
    return ApiError(response.status_code, body)


def _retry_after(response: httpx.Response) -> float:
    try:
        return max(0.1, min(float(response.headers.get("retry-after", "1")), 10.0))
    except ValueError:
        return 1.0
