"""The five running services: readiness over real dependencies, errors, bootstrap admin."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

SERVICES = ("gateway", "instances", "storage", "metering", "monitoring")
EXPECTED_CHECKS = {
    "gateway": {"mongodb", "kafka"},
    "instances": {"mongodb", "kafka", "kubernetes"},
    "storage": {"mongodb", "kafka", "object_store", "kubernetes"},
    "metering": {"mongodb", "kafka"},
    "monitoring": {"mongodb", "kafka", "kubernetes"},
}


@pytest.fixture(scope="module")
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=10) as client:
        yield client


@pytest.mark.parametrize("service", SERVICES)
async def test_service_is_ready_on_its_real_dependencies(
    service: str, stack_env: dict[str, str], http: httpx.AsyncClient
) -> None:
    base = stack_env[f"GPUCLOUD_{service.upper()}_URL"]
    assert (await http.get(f"{base}/healthz")).json() == {"status": "ok"}
    ready = await http.get(f"{base}/readyz")
    assert ready.status_code == 200, ready.text
    checks = ready.json()["checks"]
    assert set(checks) == EXPECTED_CHECKS[service]
    assert set(checks.values()) == {"ok"}
    openapi = (await http.get(f"{base}/openapi.json")).json()
    assert "/readyz" in openapi["paths"]


async def test_bootstrap_admin_key_authenticates(
    stack_env: dict[str, str], http: httpx.AsyncClient
) -> None:
    gateway = stack_env["GPUCLOUD_GATEWAY_URL"]
    key = stack_env["GPUCLOUD_BOOTSTRAP_ADMIN_KEY"]
    response = await http.get(f"{gateway}/v1/whoami", headers={"Authorization": f"Bearer {key}"})
    assert response.status_code == 200
    me = response.json()
    assert (me["keyID"], me["role"], me["tenantID"]) == ("bootstrap", "platform-admin", None)


@pytest.mark.parametrize("authorization", [None, "Bearer gpc_not-a-real-key", "Basic abc"])
async def test_missing_or_wrong_credentials_get_401_problem(
    authorization: str | None, stack_env: dict[str, str], http: httpx.AsyncClient
) -> None:
    headers = {"Authorization": authorization} if authorization else {}
    response = await http.get(f"{stack_env['GPUCLOUD_GATEWAY_URL']}/v1/whoami", headers=headers)
    assert response.status_code == 401
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["code"] == "unauthenticated"
    assert problem["status"] == 401
    assert problem["instance"] == "/v1/whoami"


async def test_unknown_route_is_a_404_problem(
    stack_env: dict[str, str], http: httpx.AsyncClient
) -> None:
    response = await http.get(f"{stack_env['GPUCLOUD_INSTANCES_URL']}/no/such/route")
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["code"] == "not_found"
