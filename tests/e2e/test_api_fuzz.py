"""schemathesis over the aggregated OpenAPI document, against the running platform.

Every generated request, valid or not, must get a non-5xx answer, and every
4xx must be a problem+json document with its machine-readable code. It runs
twice: as a tenant admin (every operation) and as a platform admin (every
operation but creating tenants, whose side effects outlive the run), one test
per service that answers, so each stays well inside the per-test timeout.

The fuzzing callers sign in with a password: their tokens are bound to no API
key, so only their tenant's (generous) rate limit applies and the run tests
the API rather than the throttle. Bounded: a few examples per operation.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

from gpucloud_gateway.routes import FORWARDED
from gpucloud_gateway.settings import GatewaySettings

from .clusters_support import (
    HOME,
    SECOND,
    SECOND_REGISTRATION,
    second_cluster_kubeconfig,
    second_cluster_storage_kubeconfig,
)

PASSWORD = "fuzzing is a long password"
EXAMPLES = 8
SERVICES = ["gateway", "instances", "storage", "metering", "monitoring"]
#: Longer than the gateway waits on a service, so that a slow or stalled service is
#: judged by the gateway's own answer (a 504 fails the run) and not by a client that
#: gave up first on a busy two-core machine.
CLIENT_TIMEOUT_S = GatewaySettings.model_fields["upstream_read_timeout_s"].default + 15


def _token(http: httpx.Client, email: str) -> str:
    signed_in = http.post("/v1/tokens", json={"email": email, "password": PASSWORD})
    assert signed_in.status_code == 201, signed_in.text
    token: str = signed_in.json()["token"]
    return token


@pytest.fixture(scope="module")
def fuzz_callers(stack_env: dict[str, str]) -> Iterator[dict[str, dict[str, str]]]:
    """Bearer headers of a tenant admin (of a tenant with no GPUs) and of a platform admin."""
    admin = {"Authorization": f"Bearer {stack_env['GPUCLOUD_BOOTSTRAP_ADMIN_KEY']}"}
    suffix = uuid.uuid4().hex[:10]
    tenant_id = f"fuzz-{suffix}"
    with httpx.Client(base_url=stack_env["GPUCLOUD_GATEWAY_URL"], timeout=30) as http:
        created = http.post(
            "/v1/tenants",
            json={"tenantID": tenant_id, "name": "fuzz", "rateLimit": {"requestsPerS": 10_000,
                  "burst": 10_000}, "limits": {"maxGpus": 0, "maxInstances": 0, "maxStorageBytes": 0},
                  "admin": {"email": f"admin@{tenant_id}.test", "name": "fuzz",
                            "role": "tenant-admin", "password": PASSWORD}},
            headers=admin,
        )  # fmt: skip
        assert created.status_code == 201, created.text
        operator_email = f"operator-{suffix}@gpucloud.test"
        operator = http.post(
            "/v1/users",
            json={"email": operator_email, "name": "fuzz operator", "role": "platform-admin",
                  "password": PASSWORD},
            headers=admin,
        )  # fmt: skip
        assert operator.status_code == 201, operator.text
        specs_before = {spec["name"] for spec in http.get("/v1/specs", headers=admin).json()}
        listed = http.get("/v1/users", params={"limit": 500}, headers=admin).json()
        users_before = {user["userID"] for user in listed} - {operator.json()["userID"]}
        yield {
            "tenant-admin": {"Authorization": f"Bearer {_token(http, f'admin@{tenant_id}.test')}"},
            "platform-admin": {"Authorization": f"Bearer {_token(http, operator_email)}"},
        }
        # The platform admin's fuzzing may have made specs, stocks (which hold GPUs)
        # and platform admins: undo them, the stack's data outlives the run.
        for stock in http.get("/v1/stocks", headers=admin).json():
            if stock["specName"] not in specs_before and stock["target"] > 0:
                http.request("DELETE", "/v1/stocks", headers=admin, json={
                    "number": stock["target"], "operationID": uuid.uuid4().hex,
                    "specName": stock["specName"]})  # fmt: skip
        for spec in http.get("/v1/specs", headers=admin).json():
            if spec["name"] not in specs_before:
                http.delete(f"/v1/specs/{spec['name']}", headers=admin)
        for user in http.get("/v1/users", params={"limit": 500}, headers=admin).json():
            if user["userID"] not in users_before:
                http.delete(f"/v1/users/{user['userID']}", headers=admin)
        http.delete(f"/v1/tenants/{tenant_id}", headers=admin)
        _restore_the_clusters(http, admin)


def _restore_the_clusters(http: httpx.Client, admin: dict[str, str]) -> None:
    """The platform admin's fuzzing draws names from the tests' own constants, so it
    may have removed the stack's second cluster, or the storage service's access to
    it, and cordoned a cluster: register and uncordon them again, as `up` left them."""
    clusters = {c["name"] for c in http.get("/v1/clusters", headers=admin).json()}
    if SECOND not in clusters:
        registered = http.post(
            "/v1/clusters", headers=admin,
            json={**SECOND_REGISTRATION, "kubeconfig": second_cluster_kubeconfig()},
        )  # fmt: skip
        assert registered.status_code == 201, registered.text
    storage = {c["name"] for c in http.get("/v1/storage-clusters", headers=admin).json()}
    if SECOND not in storage:
        given = http.put(
            f"/v1/storage-clusters/{SECOND}", headers=admin,
            json={"kubeconfig": second_cluster_storage_kubeconfig()},
        )  # fmt: skip
        assert given.status_code == 200, given.text
    for name in (HOME, SECOND):
        http.post(f"/v1/clusters/{name}/uncordon", headers=admin)


@pytest.fixture(scope="module")
def public_api(stack_env: dict[str, str]) -> Any:
    document = httpx.get(f"{stack_env['GPUCLOUD_GATEWAY_URL']}/v1/openapi.json", timeout=30).json()
    assert "x-gpucloud-unavailable-services" not in document
    return schemathesis.openapi.from_dict(document)


def _assert_well_behaved(response: Any, case: Any) -> None:
    where = f"{case.method} {case.formatted_path}: {response.status_code} {response.text[:500]}"
    assert response.status_code < 500, where
    if response.status_code >= 400:
        # schemathesis keeps headers lower-cased, each with its list of values.
        [content_type] = response.headers.get("content-type", [""])
        assert content_type.startswith("application/problem+json"), where
        body = response.json()
        assert body["status"] == response.status_code, where
        assert body["code"], where


def _service_of(method: str, path: str) -> str:
    """Which service answers a public operation: a forwarded route's, or the gateway."""
    route = next((r for r in FORWARDED if (r.method, r.path) == (method, path)), None)
    return route.service if route else "gateway"


def _fuzz(
    schema: Any,
    base_url: str,
    headers: dict[str, str],
    *,
    service: str,
    skip: set[tuple[str, str]],
) -> int:
    """Valid and invalid requests for every operation `service` answers; how many were sent."""
    sent = 0
    for result in schema.get_all_operations():
        operation = result.ok()
        key = (operation.method.upper(), operation.path)
        if key in skip or _service_of(*key) != service:
            continue
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @given(case=operation.as_strategy(generation_mode=mode))
            @settings(
                max_examples=EXAMPLES,
                deadline=None,
                derandomize=True,
                phases=[Phase.explicit, Phase.generate],
                suppress_health_check=list(HealthCheck),
                database=None,
            )
            def call(case: Any) -> None:
                nonlocal sent
                response = case.call(base_url=base_url, headers=headers, timeout=CLIENT_TIMEOUT_S)
                sent += 1
                _assert_well_behaved(response, case)

            try:
                call()
            except Unsatisfiable:
                # An operation without inputs has no invalid request to make.
                assert mode is GenerationMode.NEGATIVE, operation.path
    return sent


@pytest.mark.parametrize("service", SERVICES)
def test_fuzz_as_tenant_admin(
    service: str,
    public_api: Any,
    fuzz_callers: dict[str, dict[str, str]],
    stack_env: dict[str, str],
) -> None:
    sent = _fuzz(
        public_api, stack_env["GPUCLOUD_GATEWAY_URL"], fuzz_callers["tenant-admin"],
        service=service, skip=set(),
    )  # fmt: skip
    assert sent > 40


@pytest.mark.parametrize("service", SERVICES)
# Metering answers the platform admin from every tenant's facts, computed at read
# time (docs/metering.md): on a stack that has kept benchmark data, that is slow.
@pytest.mark.timeout(600)
def test_fuzz_as_platform_admin(
    service: str,
    public_api: Any,
    fuzz_callers: dict[str, dict[str, str]],
    stack_env: dict[str, str],
) -> None:
    sent = _fuzz(
        public_api, stack_env["GPUCLOUD_GATEWAY_URL"], fuzz_callers["platform-admin"],
        service=service, skip={("POST", "/v1/tenants")},
    )  # fmt: skip
    assert sent > 40
