"""A client of the public API, as tenants and the operator use it through the gateway."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx

from .support import eventually, unique

PROBLEM_JSON = "application/problem+json"
H100 = "NVIDIA-H100-80GB-HBM3"
MIB = 1024 * 1024


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def assert_problem(
    response: httpx.Response, status: int, code: str | None = None
) -> dict[str, Any]:
    """A refusal: the status, a problem+json body, and the machine-readable code."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM_JSON), response.headers
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    if code is not None:
        assert body["code"] == code, body
    return body


@dataclass
class TenantAccount:
    tenant_id: str
    admin_key: str
    admin_user_id: str
    admin_key_id: str


@dataclass
class Platform:
    http: httpx.AsyncClient
    admin_key: str
    tenants: list[str] = field(default_factory=list)

    @property
    def admin(self) -> dict[str, str]:
        return bearer(self.admin_key)

    async def tenant(
        self,
        *,
        max_gpus: int = 16,
        max_instances: int = 8,
        borrow_gpus: int = 0,
        rate_limit: dict[str, Any] | None = None,
        password: str | None = None,
    ) -> TenantAccount:
        tenant_id = unique("t")
        body: dict[str, Any] = {
            "tenantID": tenant_id,
            "name": f"Tenant {tenant_id}",
            "limits": {
                "maxGpus": max_gpus,
                "maxInstances": max_instances,
                "maxStorageBytes": 10**12,
                **({"borrowGpus": borrow_gpus} if borrow_gpus else {}),
            },
            "admin": {
                "email": f"admin@{tenant_id}.test",
                "name": "Admin",
                "role": "tenant-admin",
                **({"password": password} if password else {}),
            },
        }
        if rate_limit:
            body["rateLimit"] = rate_limit
        response = await self.http.post("/v1/tenants", json=body, headers=self.admin)
        assert response.status_code == 201, response.text
        created = response.json()
        self.tenants.append(tenant_id)
        return TenantAccount(
            tenant_id,
            created["adminKey"]["secret"],
            created["admin"]["userID"],
            created["adminKey"]["keyID"],
        )

    async def member(
        self, account: TenantAccount, *, role: str = "tenant-user", **key: Any
    ) -> tuple[str, str, str]:
        """A new user of the tenant signs in and makes a key: (user id, key id, secret)."""
        email, password = f"{unique('u')}@{account.tenant_id}.test", "correct horse battery"
        response = await self.http.post(
            "/v1/users",
            json={"email": email, "name": "Member", "role": role, "password": password},
            headers=bearer(account.admin_key),
        )
        assert response.status_code == 201, response.text
        user_id = response.json()["userID"]
        token = await self.http.post("/v1/tokens", json={"email": email, "password": password})
        assert token.status_code == 201, token.text
        created = await self.http.post(
            "/v1/api-keys",
            json={"name": "member key", **key},
            headers=bearer(token.json()["token"]),
        )
        assert created.status_code == 201, created.text
        return user_id, created.json()["keyID"], created.json()["secret"]

    async def spec(self, *, gpus: int = 1, gpu_type: str = H100) -> str:
        name = unique("spec")
        body = {"name": name, "cpu": "8", "memory": "64Gi", "gpuType": gpu_type, "gpuNum": gpus}
        response = await self.http.post("/v1/specs", json=body, headers=self.admin)
        assert response.status_code == 201, response.text
        return name

    async def post_as_tenant(
        self, account: TenantAccount, path: str, body: dict[str, Any]
    ) -> httpx.Response:
        """POST as the tenant's admin. A new tenant reaches the services by event, a moment
        after its creation: `tenant_not_ready` is retried, as its `retry_after_s` asks."""

        async def answered() -> httpx.Response | None:
            response = await self.http.post(path, json=body, headers=bearer(account.admin_key))
            if response.status_code == 409 and response.json()["code"] == "tenant_not_ready":
                return None
            return response

        return await eventually(answered, timeout=30)

    async def start_instance(self, account: TenantAccount, body: dict[str, Any]) -> httpx.Response:
        return await self.post_as_tenant(account, "/v1/gpu-instances", body)

    async def storage(
        self, account: TenantAccount, *, kind: str = "object", size_bytes: int = 64 * MIB,
        project: str | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """A new storage of the tenant (of `project`'s, if named), once it is ready."""
        body: dict[str, Any] = {"storageID": unique("st"), "kind": kind, "sizeBytes": size_bytes}
        if project is not None:
            body["project"] = project
        response = await self.post_as_tenant(account, "/v1/storages", body)
        assert response.status_code == 201, response.text
        storage: dict[str, Any] = response.json()
        path = f"/v1/storages/{storage['storageID']}"

        async def ready() -> dict[str, Any] | None:
            found = (await self.http.get(path, headers=bearer(account.admin_key))).json()
            return found if found["state"] == "ready" else None

        return storage if storage["state"] == "ready" else await eventually(ready, timeout=60)

    async def cleanup(self) -> None:
        """Delete the tenants made; the instances service stops their instances (the
        stack's data outlives a test run)."""
        for tenant_id in self.tenants:
            await self.http.delete(f"/v1/tenants/{tenant_id}", headers=self.admin)
        self.tenants.clear()
