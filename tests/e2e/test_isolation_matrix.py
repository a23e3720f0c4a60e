"""The isolation matrix: for every public endpoint, a second tenant (admin and user)
and a lower role of the first tenant try every resource id of the first tenant.
Every try is refused, or sees only the caller's own resources.

A test keeps the matrix complete: every operation of the aggregated OpenAPI
document must have its row, so a new endpoint cannot ship without one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from kubernetes_asyncio import client as k8s

from gpucloud_libs.kafka_connection import KafkaConnection
from gpucloud_libs.naming import job_workload_id, service_workload_id, tenant_namespace

from .platform import MIB, Platform, TenantAccount, assert_problem, bearer
from .support import eventually, unique
from .telemetry_support import gpu_history


@dataclass
class World:
    http: httpx.AsyncClient
    a: TenantAccount
    a_instance: str
    a_user_key: str  # a tenant-user of A: the lower role
    b: TenantAccount
    b_user_key: str
    spec: str
    a_invoice: str
    #: An instance id that only A uses (B reuses `a_instance`'s id on purpose).
    a_only_instance: str
    #: A's object storage, with an accessor and an unfinished multipart upload,
    #: and B's own storage, to try A's accessor and upload ids under B's path.
    a_storage: str
    a_accessor: str
    a_upload: str
    b_storage: str
    #: A GPU that ran A's instance (metrics exist), A's alert rule and its alert.
    a_gpu: str
    a_node: str
    a_rule: str
    a_alert: str
    #: A's batch job (B reuses its id), and one only A has, running and so billed.
    a_job: str
    a_only_job: str
    #: A's inference service (B reuses its id).
    a_service: str
    #: A's registry login (B reuses its id).
    a_credential: str

    async def a_storage_intact(self) -> None:
        headers = bearer(self.a.admin_key)
        path = f"/v1/storages/{self.a_storage}"
        storage = await self.http.get(path, headers=headers)
        assert storage.json()["sizeBytes"] == 256 * MIB, storage.text
        accessors = (await self.http.get(f"{path}/accessors", headers=headers)).json()["items"]
        assert [x["accessorID"] for x in accessors] == [self.a_accessor]

    @property
    def outsiders(self) -> dict[str, dict[str, str]]:
        """Callers who must never touch A's resources."""
        return {"B admin": bearer(self.b.admin_key), "B user": bearer(self.b_user_key)}

    @property
    def lower(self) -> dict[str, str]:
        return bearer(self.a_user_key)


def refused(response: httpx.Response) -> None:
    assert response.status_code in {403, 404}, (response.request.url, response.text)
    assert_problem(response, response.status_code)


async def _everyone_refused(
    world: World, method: str, path: str, *, lower_too: bool, body: Any = None
) -> None:
    callers = dict(world.outsiders)
    if lower_too:
        callers["A user"] = world.lower
    for name, headers in callers.items():
        response = await world.http.request(method, path, json=body, headers=headers)
        assert response.status_code in {403, 404}, (name, method, path, response.text)
        assert_problem(response, response.status_code)


Check = Callable[[World], Awaitable[None]]
MATRIX: dict[tuple[str, str], Check] = {}


def row(method: str, path: str) -> Callable[[Check], Check]:
    def register(check: Check) -> Check:
        MATRIX[(method, path)] = check
        return check

    return register


# --- identity ------------------------------------------------------------------------


@row("GET", "/v1/whoami")
async def _whoami(world: World) -> None:
    for headers in world.outsiders.values():
        assert (await world.http.get("/v1/whoami", headers=headers)).json()[
            "tenantID"
        ] == world.b.tenant_id


@row("POST", "/v1/tokens")
async def _tokens(world: World) -> None:
    # A token minted by B acts as B, and A's admin cannot be signed in as without A's password.
    token = (await world.http.post("/v1/tokens", json={}, headers=bearer(world.b.admin_key))).json()
    me = await world.http.get("/v1/whoami", headers=bearer(token["token"]))
    assert me.json()["tenantID"] == world.b.tenant_id
    guess = {"email": f"admin@{world.a.tenant_id}.test", "password": "password1234"}
    assert_problem(await world.http.post("/v1/tokens", json=guess), 401)


async def _console_of(world: World, key: str) -> tuple[httpx.AsyncClient, dict[str, str]]:
    """A browser signed in to the console with `key`, and the CSRF header of its changes."""
    signed_in = await world.http.post("/v1/console/session", json={"apiKey": key})
    assert signed_in.status_code == 201, signed_in.text
    browser = httpx.AsyncClient(
        base_url=str(world.http.base_url), cookies=dict(signed_in.cookies), timeout=30
    )
    return browser, {"x-csrf-token": signed_in.json()["csrfToken"]}


@row("POST", "/v1/console/session")
async def _console_sign_in(world: World) -> None:
    # B's console session acts as B: none of A's resources are there to see or change.
    browser, csrf = await _console_of(world, world.b.admin_key)
    async with browser:
        assert (await browser.get("/v1/whoami")).json()["tenantID"] == world.b.tenant_id
        refused(await browser.get(f"/v1/gpu-instances/{world.a_only_instance}"))
        refused(await browser.get(f"/v1/storages/{world.a_storage}"))
        refused(await browser.delete(f"/v1/storages/{world.a_storage}", headers=csrf))
    await world.a_storage_intact()


@row("GET", "/v1/console/session")
async def _console_session(world: World) -> None:
    browser, _ = await _console_of(world, world.b_user_key)
    async with browser:
        session = (await browser.get("/v1/console/session")).json()
        assert session["principal"]["tenantID"] == world.b.tenant_id


@row("DELETE", "/v1/console/session")
async def _console_sign_out(world: World) -> None:
    # B signing out ends B's session alone; A's stays, and B's CSRF token opens nothing of A's.
    a_browser, a_csrf = await _console_of(world, world.a.admin_key)
    b_browser, b_csrf = await _console_of(world, world.b.admin_key)
    async with a_browser, b_browser:
        assert_problem(
            await a_browser.post("/v1/api-keys", json={"name": "x"}, headers=b_csrf), 403
        )
        assert (await b_browser.delete("/v1/console/session", headers=b_csrf)).status_code == 204
        assert (await a_browser.get("/v1/whoami")).json()["tenantID"] == world.a.tenant_id
        assert (await a_browser.delete("/v1/console/session", headers=a_csrf)).status_code == 204


# --- tenants -------------------------------------------------------------------------


@row("POST", "/v1/tenants")
async def _create_tenant(world: World) -> None:
    body = {"tenantID": "x", "name": "x", "limits": {"maxGpus": 1, "maxInstances": 1,
            "maxStorageBytes": 1}, "admin": {"email": "x@x.test", "name": "x", "role": "tenant-admin"}}  # fmt: skip
    await _everyone_refused(world, "POST", "/v1/tenants", lower_too=True, body=body)


@row("GET", "/v1/tenants")
async def _list_tenants(world: World) -> None:
    await _everyone_refused(world, "GET", "/v1/tenants", lower_too=True)


@row("GET", "/v1/tenants/{tenant_id}")
async def _get_tenant(world: World) -> None:
    await _everyone_refused(world, "GET", f"/v1/tenants/{world.a.tenant_id}", lower_too=True)


@row("PATCH", "/v1/tenants/{tenant_id}")
async def _patch_tenant(world: World) -> None:
    await _everyone_refused(
        world,
        "PATCH",
        f"/v1/tenants/{world.a.tenant_id}",
        lower_too=True,
        body={"status": "suspended"},
    )


@row("POST", "/v1/tenants/{tenant_id}/users")
async def _add_tenant_user(world: World) -> None:
    # Only an operator adds users to a tenant; not even the tenant's own admin this way.
    body = {"email": f"{unique('x')}@example.test", "name": "Mallory", "role": "tenant-admin"}
    path = f"/v1/tenants/{world.a.tenant_id}/users"
    await _everyone_refused(world, "POST", path, lower_too=True, body=body)
    own = await world.http.post(path, json=body, headers=bearer(world.a.admin_key))
    refused(own)


@row("GET", "/v1/tenants/{tenant_id}/users")
async def _list_tenant_users(world: World) -> None:
    path = f"/v1/tenants/{world.a.tenant_id}/users"
    await _everyone_refused(world, "GET", path, lower_too=True)
    refused(await world.http.get(path, headers=bearer(world.a.admin_key)))


@row("DELETE", "/v1/tenants/{tenant_id}")
async def _delete_tenant(world: World) -> None:
    await _everyone_refused(world, "DELETE", f"/v1/tenants/{world.a.tenant_id}", lower_too=True)


@row("GET", "/v1/tenant")
async def _own_tenant(world: World) -> None:
    for headers in world.outsiders.values():
        assert (await world.http.get("/v1/tenant", headers=headers)).json()[
            "tenantID"
        ] == world.b.tenant_id


@row("PUT", "/v1/tenant/quota")
async def _own_quota(world: World) -> None:
    refused(await world.http.put("/v1/tenant/quota", json={"maxGpus": 0}, headers=world.lower))
    refused(
        await world.http.put(
            "/v1/tenant/quota", json={"maxGpus": 0}, headers=bearer(world.b_user_key)
        )
    )
    changed = await world.http.put(
        "/v1/tenant/quota", json={"maxGpus": 1}, headers=bearer(world.b.admin_key)
    )
    assert changed.json()["tenantID"] == world.b.tenant_id
    mine = await world.http.get("/v1/tenant", headers=bearer(world.a.admin_key))
    assert mine.json()["quota"]["maxGpus"] == 32  # A is untouched


# --- users ---------------------------------------------------------------------------


@row("POST", "/v1/users")
async def _create_user(world: World) -> None:
    body = {"email": "new@a.test", "name": "x", "role": "tenant-admin"}
    refused(await world.http.post("/v1/users", json=body, headers=world.lower))
    refused(await world.http.post("/v1/users", json=body, headers=bearer(world.b_user_key)))


@row("GET", "/v1/users")
async def _list_users(world: World) -> None:
    refused(await world.http.get("/v1/users", headers=world.lower))
    listed = await world.http.get("/v1/users", headers=bearer(world.b.admin_key))
    assert {user["tenantID"] for user in listed.json()} == {world.b.tenant_id}
    assert world.a.admin_user_id not in {user["userID"] for user in listed.json()}


@row("GET", "/v1/users/{user_id}")
async def _get_user(world: World) -> None:
    await _everyone_refused(world, "GET", f"/v1/users/{world.a.admin_user_id}", lower_too=True)


@row("PATCH", "/v1/users/{user_id}")
async def _patch_user(world: World) -> None:
    await _everyone_refused(
        world,
        "PATCH",
        f"/v1/users/{world.a.admin_user_id}",
        lower_too=True,
        body={"status": "disabled"},
    )


@row("DELETE", "/v1/users/{user_id}")
async def _delete_user(world: World) -> None:
    await _everyone_refused(world, "DELETE", f"/v1/users/{world.a.admin_user_id}", lower_too=True)


@row("POST", "/v1/users/{user_id}/api-keys")
async def _mint_user_key(world: World) -> None:
    await _everyone_refused(
        world, "POST", f"/v1/users/{world.a.admin_user_id}/api-keys", lower_too=True,
        body={"name": "theirs"},
    )  # fmt: skip


@row("GET", "/v1/users/{user_id}/limits")
async def _get_user_limits(world: World) -> None:
    await _everyone_refused(
        world, "GET", f"/v1/users/{world.a.admin_user_id}/limits", lower_too=True
    )


@row("PUT", "/v1/users/{user_id}/limits")
async def _set_user_limits(world: World) -> None:
    await _everyone_refused(
        world, "PUT", f"/v1/users/{world.a.admin_user_id}/limits", lower_too=True,
        body={"maxGpus": 0},
    )  # fmt: skip


async def _a_invitation(world: World) -> dict[str, Any]:
    made = await world.http.post(
        "/v1/invitations", json={"email": f"{unique('inv')}@{world.a.tenant_id}.test"},
        headers=bearer(world.a.admin_key),
    )  # fmt: skip
    assert made.status_code == 201, made.text
    return dict(made.json())


@row("POST", "/v1/invitations")
async def _invite(world: World) -> None:
    # A's plain user invites nobody; B's admin invites to B alone.
    body = {"email": f"{unique('inv')}@x.test"}
    refused(await world.http.post("/v1/invitations", json=body, headers=world.lower))
    made = await world.http.post("/v1/invitations", json=body, headers=bearer(world.b.admin_key))
    assert made.json()["invitation"]["tenantID"] == world.b.tenant_id


@row("POST", "/v1/kubeconfig")
async def _kubeconfig(world: World) -> None:
    # Anyone's kubeconfig is for their own tenant's namespace; no body picks another.
    for headers in world.outsiders.values():
        issued = await world.http.post(
            "/v1/kubeconfig", json={"namespace": tenant_namespace(world.a.tenant_id)},
            headers=headers,
        )  # fmt: skip
        assert_problem(issued, 422)
        mine = await world.http.post("/v1/kubeconfig", json={}, headers=headers)
        assert mine.json()["namespace"] == tenant_namespace(world.b.tenant_id), mine.text
    # A project of A's: its admin gets its namespace; nobody else learns it is there.
    project_id = await _a_project(world)

    async def issued_to_a() -> bool:
        body = {"project": project_id}
        ran = await world.http.post("/v1/kubeconfig", json=body, headers=bearer(world.a.admin_key))
        return ran.status_code == 201

    await eventually(issued_to_a, timeout=30)
    for headers in [*world.outsiders.values(), world.lower]:
        theirs = await world.http.post(
            "/v1/kubeconfig", json={"project": project_id}, headers=headers
        )
        assert_problem(theirs, 404)


@row("PUT", "/v1/tenant/sso")
async def _set_sso(world: World) -> None:
    # A's plain user sets none; B's admin sets B's (refused here: no provider answers).
    body = {"issuer": "http://127.0.0.1:9/none", "clientID": "x", "clientSecret": "y"}
    refused(await world.http.put("/v1/tenant/sso", json=body, headers=world.lower))
    theirs = await world.http.put("/v1/tenant/sso", json=body, headers=bearer(world.b.admin_key))
    assert_problem(theirs, 422)


@row("GET", "/v1/tenant/sso")
async def _get_sso(world: World) -> None:
    refused(await world.http.get("/v1/tenant/sso", headers=world.lower))
    for headers in world.outsiders.values():
        assert (await world.http.get("/v1/tenant/sso", headers=headers)).status_code in {403, 404}


@row("DELETE", "/v1/tenant/sso")
async def _delete_sso(world: World) -> None:
    refused(await world.http.delete("/v1/tenant/sso", headers=world.lower))


@row("GET", "/v1/sso/{tenant_id}/start")
async def _start_sso(world: World) -> None:
    # Anyone may start a sign-in; A has no provider, so there is none to start.
    for headers in [*world.outsiders.values(), world.lower]:
        started = await world.http.get(f"/v1/sso/{world.a.tenant_id}/start", headers=headers)
        assert_problem(started, 404)


@row("GET", "/v1/sso/callback")
async def _sso_callback(world: World) -> None:
    # A callback is a sign-in's state, not a credential: none of theirs opens one.
    for headers in [*world.outsiders.values(), world.lower]:
        back = await world.http.get(
            "/v1/sso/callback", params={"state": "s" * 43, "code": "c"}, headers=headers
        )
        assert_problem(back, 400)


# --- projects ------------------------------------------------------------------------


async def _a_project(world: World) -> str:
    """A project of A's (with A's admin as its member), made for the row asking."""
    project_id = unique("p")[:20]
    made = await world.http.post(
        "/v1/projects", json={"projectID": project_id, "name": "A's", "maxGpus": 0},
        headers=bearer(world.a.admin_key),
    )  # fmt: skip
    assert made.status_code == 201, made.text
    return project_id


@row("POST", "/v1/projects")
async def _create_project(world: World) -> None:
    refused(await world.http.post(
        "/v1/projects", json={"projectID": "mine", "name": "x"}, headers=world.lower
    ))  # fmt: skip


@row("GET", "/v1/projects")
async def _list_projects(world: World) -> None:
    mine = await _a_project(world)
    for headers in [*world.outsiders.values(), world.lower]:
        listed = await world.http.get("/v1/projects", headers=headers)
        assert mine not in {p["projectID"] for p in listed.json()}, listed.text


@row("GET", "/v1/projects/{project_id}")
async def _get_project(world: World) -> None:
    mine = await _a_project(world)
    for headers in [*world.outsiders.values(), world.lower]:  # A's user is no member
        assert_problem(await world.http.get(f"/v1/projects/{mine}", headers=headers), 404)


@row("PATCH", "/v1/projects/{project_id}")
async def _update_project(world: World) -> None:
    mine = await _a_project(world)
    await _everyone_refused(
        world, "PATCH", f"/v1/projects/{mine}", lower_too=True, body={"maxGpus": 1}
    )


@row("DELETE", "/v1/projects/{project_id}")
async def _delete_project(world: World) -> None:
    mine = await _a_project(world)
    await _everyone_refused(world, "DELETE", f"/v1/projects/{mine}", lower_too=True)
    kept = await world.http.get(f"/v1/projects/{mine}", headers=bearer(world.a.admin_key))
    assert kept.status_code == 200, kept.text


@row("PUT", "/v1/projects/{project_id}/members/{user_id}")
async def _add_project_member(world: World) -> None:
    mine = await _a_project(world)
    path = f"/v1/projects/{mine}/members/{world.a.admin_user_id}"
    await _everyone_refused(world, "PUT", path, lower_too=True)


@row("DELETE", "/v1/projects/{project_id}/members/{user_id}")
async def _remove_project_member(world: World) -> None:
    mine = await _a_project(world)
    path = f"/v1/projects/{mine}/members/{world.a.admin_user_id}"
    assert (await world.http.put(path, headers=bearer(world.a.admin_key))).status_code == 200
    await _everyone_refused(world, "DELETE", path, lower_too=True)


@row("POST", "/v1/sso/{tenant_id}/device")
async def _start_sso_device(world: World) -> None:
    # As a browser's start: A has no provider, whoever asks.
    for headers in [*world.outsiders.values(), world.lower]:
        started = await world.http.post(f"/v1/sso/{world.a.tenant_id}/device", headers=headers)
        assert_problem(started, 404)


@row("POST", "/v1/sso/device/token")
async def _poll_sso_device(world: World) -> None:
    # A poll token is a CLI's sign-in, not a credential: none of theirs opens one.
    for headers in [*world.outsiders.values(), world.lower]:
        polled = await world.http.post(
            "/v1/sso/device/token", json={"pollToken": "p" * 43}, headers=headers
        )
        assert_problem(polled, 410)


@row("GET", "/v1/invitations")
async def _list_invitations(world: World) -> None:
    mine = (await _a_invitation(world))["invitation"]["invitationID"]
    refused(await world.http.get("/v1/invitations", headers=world.lower))
    theirs = await world.http.get("/v1/invitations", headers=bearer(world.b.admin_key))
    assert mine not in {i["invitationID"] for i in theirs.json()}


@row("DELETE", "/v1/invitations/{invitation_id}")
async def _revoke_invitation(world: World) -> None:
    made = await _a_invitation(world)
    path = f"/v1/invitations/{made['invitation']['invitationID']}"
    await _everyone_refused(world, "DELETE", path, lower_too=True)
    still = await world.http.post("/v1/invitations/preview", json={"token": made["token"]})
    assert still.status_code == 200, still.text


@row("POST", "/v1/invitations/preview")
async def _preview_invitation(world: World) -> None:
    # No credential opens an invitation: only its link's secret does.
    for headers in [*world.outsiders.values(), world.lower]:
        guessed = {"token": "gpi_" + "0" * 43}
        response = await world.http.post("/v1/invitations/preview", json=guessed, headers=headers)
        assert_problem(response, 404)


@row("POST", "/v1/invitations/accept")
async def _accept_invitation(world: World) -> None:
    for headers in [*world.outsiders.values(), world.lower]:
        guessed = {"token": "gpi_" + "0" * 43, "name": "Mallory", "password": "x" * 16}
        response = await world.http.post("/v1/invitations/accept", json=guessed, headers=headers)
        assert_problem(response, 404)


@row("POST", "/v1/invitations/sso")
async def _join_by_sso(world: World) -> None:
    # A's invitation, through A's provider: without its link, no credential begins it.
    for headers in [*world.outsiders.values(), world.lower]:
        guessed = {"token": "gpi_" + "0" * 43}
        response = await world.http.post("/v1/invitations/sso", json=guessed, headers=headers)
        assert_problem(response, 404)


@row("POST", "/v1/invitations/sso-device")
async def _join_by_sso_device(world: World) -> None:
    for headers in [*world.outsiders.values(), world.lower]:
        guessed = {"token": "gpi_" + "0" * 43}
        started = await world.http.post("/v1/invitations/sso-device", json=guessed, headers=headers)
        assert_problem(started, 404)


# --- API keys ------------------------------------------------------------------------


@row("POST", "/v1/api-keys")
async def _create_key(world: World) -> None:
    for headers in [*world.outsiders.values(), world.lower]:
        created = await world.http.post("/v1/api-keys", json={"name": "mine"}, headers=headers)
        assert created.status_code == 201
        assert created.json()["userID"] != world.a.admin_user_id  # only ever for oneself


@row("GET", "/v1/api-keys")
async def _list_keys(world: World) -> None:
    for headers in [*world.outsiders.values(), world.lower]:
        listed = await world.http.get("/v1/api-keys", headers=headers)
        assert world.a.admin_key_id not in {key["keyID"] for key in listed.json()}


@row("GET", "/v1/api-keys/{key_id}")
async def _get_key(world: World) -> None:
    await _everyone_refused(world, "GET", f"/v1/api-keys/{world.a.admin_key_id}", lower_too=True)


@row("DELETE", "/v1/api-keys/{key_id}")
async def _revoke_key(world: World) -> None:
    await _everyone_refused(world, "DELETE", f"/v1/api-keys/{world.a.admin_key_id}", lower_too=True)
    assert (
        await world.http.get("/v1/whoami", headers=bearer(world.a.admin_key))
    ).status_code == 200


# --- audit ---------------------------------------------------------------------------


@row("GET", "/v1/audit")
async def _audit(world: World) -> None:
    refused(await world.http.get("/v1/audit", headers=world.lower))
    refused(await world.http.get("/v1/audit", headers=bearer(world.b_user_key)))
    seen = await world.http.get(
        "/v1/audit", params={"tenantID": world.a.tenant_id}, headers=bearer(world.b.admin_key)
    )
    assert {entry["tenantID"] for entry in seen.json()["items"]} == {world.b.tenant_id}


# --- instances -----------------------------------------------------------------------


@row("POST", "/v1/gpu-instances/{instance_id}/ports/{port}/session")
async def _instance_session(world: World) -> None:
    path = f"/v1/gpu-instances/{world.a_instance}/ports/8888/session"
    for headers in world.outsiders.values():
        refused(await world.http.post(path, headers=headers))


@row("POST", "/v1/gpu-instances")
async def _create_instance(world: World) -> None:
    # Reusing A's instance id creates B's own instance, revealing nothing about A's.
    body = {"instanceID": world.a_instance, "image": "busybox", "specName": world.spec}
    created = await world.http.post(
        "/v1/gpu-instances", json=body, headers=bearer(world.b.admin_key)
    )
    assert created.status_code == 202, created.text
    assert created.json()["tenantID"] == world.b.tenant_id


@row("GET", "/v1/gpu-instances")
async def _list_instances(world: World) -> None:
    for headers in world.outsiders.values():
        listed = await world.http.get(
            "/v1/gpu-instances", params={"tenantID": world.a.tenant_id}, headers=headers
        )
        assert {item["tenantID"] for item in listed.json()["items"]} <= {world.b.tenant_id}


@row("GET", "/v1/gpu-instances/{instance_id}")
async def _get_instance(world: World) -> None:
    # B made an instance with the same id: B sees that one, never A's.
    for headers in world.outsiders.values():
        got = await world.http.get(f"/v1/gpu-instances/{world.a_instance}", headers=headers)
        assert got.status_code == 404 or got.json()["tenantID"] == world.b.tenant_id


@row("GET", "/v1/gpu-instances/{instance_id}/logs")
async def _instance_logs(world: World) -> None:
    mine = await world.http.get(
        f"/v1/gpu-instances/{world.a_only_instance}/logs", headers=bearer(world.a.admin_key)
    )
    # A reaches its own instance: its log while it runs, else why there is none.
    assert mine.status_code == 200 or mine.json()["code"] == "instance_not_running", mine.text
    # B gets a 404 for the instance only A has, whatever its state: nothing leaks.
    path = f"/v1/gpu-instances/{world.a_only_instance}/logs"
    for headers in world.outsiders.values():
        for query in ("", "?follow=true"):
            response = await world.http.get(path + query, headers=headers)
            assert_problem(response, 404)


@row("DELETE", "/v1/gpu-instances/{instance_id}")
async def _stop_instance(world: World) -> None:
    # Stopping "A's" id stops at most B's own instance of that id; A's is untouched.
    for headers in world.outsiders.values():
        stopped = await world.http.delete(f"/v1/gpu-instances/{world.a_instance}", headers=headers)
        assert stopped.status_code == 404 or stopped.json()["tenantID"] == world.b.tenant_id
    mine = await world.http.get(
        f"/v1/gpu-instances/{world.a_instance}", headers=bearer(world.a.admin_key)
    )
    assert mine.json()["stopRequested"] is False


@row("POST", "/v1/gpu-instances/{instance_id}/stop")
async def _request_stop(world: World) -> None:
    # As DELETE: "A's" id names at most B's own instance of that id; A's is untouched.
    for headers in world.outsiders.values():
        stopped = await world.http.post(
            f"/v1/gpu-instances/{world.a_instance}/stop", headers=headers
        )
        assert stopped.status_code == 404 or stopped.json()["tenantID"] == world.b.tenant_id
    mine = await world.http.get(
        f"/v1/gpu-instances/{world.a_instance}", headers=bearer(world.a.admin_key)
    )
    assert mine.json()["stopRequested"] is False


@row("POST", "/v1/gpu-instances/{instance_id}/start")
async def _request_start(world: World) -> None:
    # B cannot start (or learn of) the instance only A has; A's is untouched.
    path = f"/v1/gpu-instances/{world.a_only_instance}"
    before = await world.http.get(path, headers=bearer(world.a.admin_key))
    for headers in world.outsiders.values():
        assert_problem(await world.http.post(f"{path}/start", headers=headers), 404)
    after = await world.http.get(path, headers=bearer(world.a.admin_key))
    assert after.json()["revision"] == before.json()["revision"]


# --- batch jobs --------------------------------------------------------------------


@row("POST", "/v1/jobs")
async def _submit_job(world: World) -> None:
    # Reusing A's job id submits B's own job, revealing nothing about A's.
    body = {"jobID": world.a_job, "image": "busybox", "specName": world.spec}
    created = await world.http.post("/v1/jobs", json=body, headers=bearer(world.b.admin_key))
    assert created.status_code == 202, created.text
    assert created.json()["tenantID"] == world.b.tenant_id


@row("GET", "/v1/jobs")
async def _list_jobs(world: World) -> None:
    for headers in world.outsiders.values():
        listed = await world.http.get(
            "/v1/jobs", params={"tenantID": world.a.tenant_id}, headers=headers
        )
        assert listed.status_code == 200, listed.text
        assert {item["tenantID"] for item in listed.json()["items"]} <= {world.b.tenant_id}


@row("GET", "/v1/jobs/{job_id}")
async def _get_job(world: World) -> None:
    for headers in world.outsiders.values():
        refused(await world.http.get(f"/v1/jobs/{world.a_only_job}", headers=headers))
        got = await world.http.get(f"/v1/jobs/{world.a_job}", headers=headers)
        assert got.status_code == 404 or got.json()["tenantID"] == world.b.tenant_id


@row("GET", "/v1/jobs/{job_id}/logs")
async def _job_logs(world: World) -> None:
    for headers in world.outsiders.values():
        refused(await world.http.get(f"/v1/jobs/{world.a_only_job}/logs", headers=headers))


@row("DELETE", "/v1/jobs/{job_id}")
async def _cancel_job(world: World) -> None:
    for headers in world.outsiders.values():
        refused(await world.http.delete(f"/v1/jobs/{world.a_only_job}", headers=headers))
        cancelled = await world.http.delete(f"/v1/jobs/{world.a_job}", headers=headers)
        assert cancelled.status_code == 404 or cancelled.json()["tenantID"] == world.b.tenant_id
    for job_id in (world.a_job, world.a_only_job):
        mine = await world.http.get(f"/v1/jobs/{job_id}", headers=bearer(world.a.admin_key))
        assert mine.json()["cancelRequested"] is False, mine.text
        assert mine.json()["state"] != "cancelled"


# --- registry credentials --------------------------------------------------------------

A_REGISTRY = "nvcr.io"


async def _a_credential_intact(world: World) -> None:
    mine = await world.http.get(
        f"/v1/registry-credentials/{world.a_credential}", headers=bearer(world.a.admin_key)
    )
    assert mine.status_code == 200, mine.text
    assert (mine.json()["registry"], mine.json()["username"]) == (A_REGISTRY, "a-user")


@row("POST", "/v1/registry-credentials")
async def _create_credential(world: World) -> None:
    body = {"credentialID": world.a_credential, "registry": "ghcr.io", "username": "b-user",
            "password": "b-password"}  # fmt: skip
    mine = await world.http.post(
        "/v1/registry-credentials", json=body, headers=bearer(world.b.admin_key)
    )
    assert mine.status_code == 201, mine.text
    refused(await world.http.post("/v1/registry-credentials", json=body, headers=world.lower))
    await _a_credential_intact(world)


@row("GET", "/v1/registry-credentials")
async def _list_credentials(world: World) -> None:
    for headers in world.outsiders.values():
        listed = (await world.http.get("/v1/registry-credentials", headers=headers)).json()
        assert all(item["registry"] != A_REGISTRY for item in listed), listed


@row("GET", "/v1/registry-credentials/{credential_id}")
async def _get_credential(world: World) -> None:
    for headers in world.outsiders.values():
        got = await world.http.get(
            f"/v1/registry-credentials/{world.a_credential}", headers=headers
        )
        if got.status_code != 404:
            assert got.json()["registry"] != A_REGISTRY, got.text  # B's own of that name
        else:
            refused(got)


@row("DELETE", "/v1/registry-credentials/{credential_id}")
async def _delete_credential(world: World) -> None:
    path = f"/v1/registry-credentials/{world.a_credential}"
    refused(await world.http.delete(path, headers=world.lower))
    for headers in world.outsiders.values():
        assert (await world.http.delete(path, headers=headers)).status_code in {204, 403, 404}
    await _a_credential_intact(world)


# --- the app catalog: the same for everyone, no tenant's data in it -------------------


@row("GET", "/v1/templates")
async def _templates(world: World) -> None:
    mine = (await world.http.get("/v1/templates", headers=bearer(world.a.admin_key))).json()
    for headers in world.outsiders.values():
        assert (await world.http.get("/v1/templates", headers=headers)).json() == mine


@row("GET", "/v1/templates/{template_id}")
async def _template(world: World) -> None:
    path = "/v1/templates/jupyter"
    mine = (await world.http.get(path, headers=bearer(world.a.admin_key))).json()
    for headers in world.outsiders.values():
        assert (await world.http.get(path, headers=headers)).json() == mine


# --- inference services -------------------------------------------------------------

A_SERVICE_IMAGE = "registry.test/a-llm:1"


async def _a_service_intact(world: World) -> None:
    mine = await world.http.get(
        f"/v1/inference-services/{world.a_service}", headers=bearer(world.a.admin_key)
    )
    assert mine.status_code == 200, mine.text
    assert (mine.json()["image"], mine.json()["revision"]) == (A_SERVICE_IMAGE, 1)
    assert mine.json()["state"] != "deleting"


def _own_or_missing(response: httpx.Response, world: World) -> None:
    """B reaching "A's" id finds only B's own service of that name, or nothing."""
    if response.status_code != 404:
        assert response.json()["tenantID"] == world.b.tenant_id, response.text
    else:
        refused(response)


@row("POST", "/v1/inference-services")
async def _create_service(world: World) -> None:
    # B's quota is down to one GPU by now (the quota row): no surge, so one GPU is held.
    body = {"serviceID": world.a_service, "image": "registry.test/b:1", "specName": world.spec,
            "port": 8000, "strategy": {"maxSurge": 0, "maxUnavailable": 1}}  # fmt: skip
    created = await world.http.post(
        "/v1/inference-services", json=body, headers=bearer(world.b.admin_key)
    )
    assert created.status_code == 201, created.text
    assert created.json()["tenantID"] == world.b.tenant_id
    assert world.b.tenant_id in created.json()["url"]
    await _a_service_intact(world)


@row("GET", "/v1/inference-services")
async def _list_services(world: World) -> None:
    for headers in world.outsiders.values():
        listed = await world.http.get(
            "/v1/inference-services", params={"tenantID": world.a.tenant_id}, headers=headers
        )
        assert listed.status_code == 200, listed.text
        assert {item["tenantID"] for item in listed.json()["items"]} <= {world.b.tenant_id}


@row("GET", "/v1/inference-services/{service_id}")
async def _get_service(world: World) -> None:
    for headers in world.outsiders.values():
        path = f"/v1/inference-services/{world.a_service}"
        _own_or_missing(await world.http.get(path, headers=headers), world)
        refused(await world.http.get(f"{path}-nope", headers=headers))


@row("GET", "/v1/inference-services/{service_id}/replicas")
async def _service_replicas(world: World) -> None:
    # B's own service of that id answers with B's replicas; A's are never shown.
    for headers in world.outsiders.values():
        path = f"/v1/inference-services/{world.a_service}/replicas"
        got = await world.http.get(path, headers=headers)
        if got.status_code != 404:
            assert got.status_code == 200, got.text
            mine = await world.http.get(path, headers=bearer(world.a.admin_key))
            theirs = {run["replicaID"] for run in got.json()["items"]}
            assert not theirs & {run["replicaID"] for run in mine.json()["items"]}
        refused(
            await world.http.get(
                f"/v1/inference-services/{world.a_service}-nope/replicas", headers=headers
            )
        )
        # Naming A's tenant changes nothing: only a platform admin's tenantID counts.
        named = await world.http.get(path, params={"tenantID": world.a.tenant_id}, headers=headers)
        assert named.status_code == got.status_code, named.text


@row("PATCH", "/v1/inference-services/{service_id}")
async def _change_service(world: World) -> None:
    for headers in world.outsiders.values():
        changed = await world.http.patch(
            f"/v1/inference-services/{world.a_service}",
            json={"image": "registry.test/evil:1"},
            headers=headers,
        )
        _own_or_missing(changed, world)
    await _a_service_intact(world)


@row("POST", "/v1/inference-services/{service_id}/rollback")
async def _rollback_service(world: World) -> None:
    for headers in world.outsiders.values():
        rolled = await world.http.post(
            f"/v1/inference-services/{world.a_service}/rollback",
            json={"revision": 1},
            headers=headers,
        )
        _own_or_missing(rolled, world)
    await _a_service_intact(world)


@row("DELETE", "/v1/inference-services/{service_id}")
async def _delete_service(world: World) -> None:
    for headers in world.outsiders.values():
        deleted = await world.http.delete(
            f"/v1/inference-services/{world.a_service}", headers=headers
        )
        _own_or_missing(deleted, world)
    await _a_service_intact(world)


# --- the platform catalogue: tenants read it, only the platform admin changes it ------


@row("GET", "/v1/quota")
async def _own_gpu_quota(world: World) -> None:
    # Each caller reads its own tenant's quota, never another's: A holds a running
    # instance; B's numbers are B's.
    async def quota_of(headers: dict[str, str]) -> Any:
        tenant = await world.http.get("/v1/tenant", headers=headers)
        return tenant.json()["quota"]["maxGpus"]

    own = await world.http.get("/v1/quota", headers=world.lower)
    assert own.status_code == 200, own.text
    assert own.json()["gpusInUse"] >= 1
    assert own.json()["maxGpus"] == await quota_of(bearer(world.a.admin_key))
    b_max = await quota_of(bearer(world.b.admin_key))
    for headers in world.outsiders.values():
        theirs = await world.http.get("/v1/quota", headers=headers)
        assert theirs.status_code == 200, theirs.text
        assert theirs.json()["maxGpus"] == b_max


@row("GET", "/v1/specs")
async def _list_specs(world: World) -> None:
    assert (await world.http.get("/v1/specs", headers=world.lower)).status_code == 200


@row("GET", "/v1/specs/{name}")
async def _get_spec(world: World) -> None:
    assert (await world.http.get(f"/v1/specs/{world.spec}", headers=world.lower)).status_code == 200


@row("GET", "/v1/regions")
async def _list_regions(world: World) -> None:
    # Shared, like the specs: every tenant sees the same regions and no cluster's name.
    answer = await world.http.get("/v1/regions", headers=world.lower)
    assert answer.status_code == 200, answer.text
    assert all(set(region) == {"name", "zones", "gpuTypes", "open"} for region in answer.json())


@row("POST", "/v1/specs")
async def _create_spec(world: World) -> None:
    body = {"name": "evil", "cpu": "1", "memory": "1Gi", "gpuType": "x", "gpuNum": 1}
    await _everyone_refused(world, "POST", "/v1/specs", lower_too=True, body=body)


@row("DELETE", "/v1/specs/{name}")
async def _delete_spec(world: World) -> None:
    await _everyone_refused(world, "DELETE", f"/v1/specs/{world.spec}", lower_too=True)


@row("GET", "/v1/stocks")
async def _list_stocks(world: World) -> None:
    await _everyone_refused(world, "GET", "/v1/stocks", lower_too=True)


@row("POST", "/v1/stocks")
async def _add_stock(world: World) -> None:
    body = {"number": 1, "operationID": "x", "specName": world.spec}
    await _everyone_refused(world, "POST", "/v1/stocks", lower_too=True, body=body)


@row("DELETE", "/v1/stocks")
async def _remove_stock(world: World) -> None:
    body = {"number": 1, "operationID": "y", "specName": world.spec}
    await _everyone_refused(world, "DELETE", "/v1/stocks", lower_too=True, body=body)


# Clusters are the operator's alone: no tenant role lists, changes or registers one.
def _operator_only(method: str, path: str, body: Any = None) -> Check:
    async def check(world: World) -> None:
        await _everyone_refused(world, method, path, lower_too=True, body=body)

    return check


for _c_method, _c_route, _c_path, _c_body in (
    ("GET", "/v1/clusters", "/v1/clusters", None),
    ("POST", "/v1/clusters", "/v1/clusters",
     {"name": "mine", "region": "r", "zones": ["z"], "kubeconfig": "clusters: []"}),
    ("GET", "/v1/clusters/{name}", "/v1/clusters/local-1", None),
    ("DELETE", "/v1/clusters/{name}", "/v1/clusters/local-2", None),
    *(("POST", f"/v1/clusters/{{name}}/{verb}", f"/v1/clusters/local-1/{verb}", None)
      for verb in ("cordon", "drain", "uncordon")),
    ("GET", "/v1/storage-clusters", "/v1/storage-clusters", None),
    ("PUT", "/v1/storage-clusters/{name}", "/v1/storage-clusters/local-2",
     {"kubeconfig": "clusters: []"}),
    ("DELETE", "/v1/storage-clusters/{name}", "/v1/storage-clusters/local-2", None),
):  # fmt: skip
    row(_c_method, _c_route)(_operator_only(_c_method, _c_path, _c_body))


# --- metering: usage, prices, invoices, budgets ----------------------------------------


@row("GET", "/v1/prices")
async def _list_prices(world: World) -> None:
    assert (await world.http.get("/v1/prices", headers=world.lower)).status_code == 200


@row("POST", "/v1/prices")
async def _add_price(world: World) -> None:
    body = {"meter": "gpu_hour", "specName": world.spec, "amount": "0"}
    await _everyone_refused(world, "POST", "/v1/prices", lower_too=True, body=body)


@row("DELETE", "/v1/prices/{price_id}")
async def _remove_price(world: World) -> None:
    path = "/v1/prices/gpu_hour:any@1"
    await _everyone_refused(world, "DELETE", path, lower_too=True)


@row("GET", "/v1/usage/mine")
async def _my_usage(world: World) -> None:
    # Each caller's own, in their own tenant: B's members never see A's workloads,
    # whatever tenant they name.
    # (B has an instance of A's shared id of its own; A's only instance is A's alone.)
    for headers in world.outsiders.values():
        asked = await world.http.get(
            "/v1/usage/mine", params={"tenantID": world.a.tenant_id}, headers=headers
        )
        assert asked.status_code == 200, asked.text
        assert asked.json()["tenantID"] == world.b.tenant_id
        keys = {row["key"] for row in asked.json()["rows"]}
        assert world.a_only_instance not in keys, keys


@row("GET", "/v1/usage")
async def _usage(world: World) -> None:
    refused(await world.http.get("/v1/usage", headers=world.lower))
    refused(await world.http.get("/v1/usage", headers=bearer(world.b_user_key)))
    # A fixed end in the past makes both reports the same even while B's instance runs;
    # a workload of B's that ended before that end may still be on its way to metering
    # (B deleted its service above), so the two are compared until its facts are in.
    period = {"start": "2026-01-01T00:00:00Z", "end": datetime.now(UTC).isoformat()}

    async def same() -> bool:
        asked = await world.http.get(
            "/v1/usage",
            params={**period, "tenantID": world.a.tenant_id},
            headers=bearer(world.b.admin_key),
        )
        own = await world.http.get("/v1/usage", params=period, headers=bearer(world.b.admin_key))
        assert asked.json()["tenantID"] == world.b.tenant_id
        assert world.a.tenant_id not in asked.text
        return bool(asked.json()["rows"] == own.json()["rows"])  # the tenantID asked is ignored

    await eventually(same, timeout=30)


@row("GET", "/v1/usage.csv")
async def _usage_csv(world: World) -> None:
    refused(await world.http.get("/v1/usage.csv", headers=world.lower))
    seen = await world.http.get(
        "/v1/usage.csv", params={"tenantID": world.a.tenant_id}, headers=bearer(world.b.admin_key)
    )
    assert seen.status_code == 200
    assert world.a.tenant_id not in seen.text


@row("GET", "/v1/usage/instances/{instance_id}")
async def _instance_usage(world: World) -> None:
    # An instance only A has: once metering has its facts, A reads them and B cannot.
    path = f"/v1/usage/instances/{world.a_only_instance}"

    async def recorded() -> bool:
        return (await world.http.get(path, headers=bearer(world.a.admin_key))).status_code == 200

    await eventually(recorded, timeout=30)
    for headers in world.outsiders.values():
        refused(await world.http.get(path, headers=headers))


@row("GET", "/v1/usage/jobs/{job_id}")
async def _job_usage(world: World) -> None:
    # A job only A has, running: once metering has its run's facts, A reads them, B cannot.
    path = f"/v1/usage/jobs/{world.a_only_job}"

    async def recorded() -> bool:
        return (await world.http.get(path, headers=bearer(world.a.admin_key))).status_code == 200

    await eventually(recorded, timeout=30)
    for headers in world.outsiders.values():
        refused(await world.http.get(path, headers=headers))


@row("GET", "/v1/usage/inference-services/{service_id}")
async def _service_usage(world: World) -> None:
    # A's service runs a replica: once metering has its facts, A reads them. B reaches
    # only its own service of the same name (made by the POST row), or nothing.
    path = f"/v1/usage/inference-services/{world.a_service}"

    async def recorded() -> bool:
        return (await world.http.get(path, headers=bearer(world.a.admin_key))).status_code == 200

    await eventually(recorded, timeout=30)
    for headers in world.outsiders.values():
        answer = await world.http.get(path, headers=headers)
        if answer.status_code != 404:
            assert answer.json()["tenantID"] == world.b.tenant_id, answer.text
        else:
            refused(answer)


@row("GET", "/v1/revenue")
async def _revenue(world: World) -> None:
    await _everyone_refused(world, "GET", "/v1/revenue", lower_too=True)


@row("POST", "/v1/invoices")
async def _issue_invoice(world: World) -> None:
    body = {"tenantID": world.a.tenant_id, "period": "2026-01"}
    await _everyone_refused(world, "POST", "/v1/invoices", lower_too=True, body=body)


@row("GET", "/v1/invoices")
async def _list_invoices(world: World) -> None:
    refused(await world.http.get("/v1/invoices", headers=world.lower))
    seen = await world.http.get(
        "/v1/invoices", params={"tenantID": world.a.tenant_id}, headers=bearer(world.b.admin_key)
    )
    assert all(invoice["tenantID"] == world.b.tenant_id for invoice in seen.json())


@row("GET", "/v1/invoices/{invoice_id}")
async def _get_invoice(world: World) -> None:
    await _everyone_refused(world, "GET", f"/v1/invoices/{world.a_invoice}", lower_too=True)


@row("GET", "/v1/invoice-drafts/{period}")
async def _draft_invoice(world: World) -> None:
    refused(await world.http.get("/v1/invoice-drafts/2026-01", headers=world.lower))
    seen = await world.http.get(
        "/v1/invoice-drafts/2026-01",
        params={"tenantID": world.a.tenant_id},
        headers=bearer(world.b.admin_key),
    )
    assert seen.json()["tenantID"] == world.b.tenant_id


@row("GET", "/v1/budget")
async def _get_budget(world: World) -> None:
    refused(await world.http.get("/v1/budget", headers=world.lower))
    refused(await world.http.get("/v1/budget", headers=bearer(world.b_user_key)))
    mine = await world.http.get("/v1/budget", headers=bearer(world.b.admin_key))
    assert mine.status_code == 404  # B has none; A's is not B's


@row("PUT", "/v1/budget")
async def _set_budget(world: World) -> None:
    body = {"monthlyBudgetCents": 1}
    refused(await world.http.put("/v1/budget", json=body, headers=world.lower))
    refused(await world.http.put("/v1/budget", json=body, headers=bearer(world.b_user_key)))
    mine = await world.http.get("/v1/budget", headers=bearer(world.a.admin_key))
    assert mine.json()["monthlyBudgetCents"] == 10_000


# --- storage ---------------------------------------------------------------------------
# Tenant members share their tenant's storages, so the lower role is not refused here;
# the other tenant gets 404 for every id of A's, and nothing of A's changes.


def _outsiders_404(world: World, method: str, path: str) -> Awaitable[None]:
    async def check() -> None:
        for name, headers in world.outsiders.items():
            response = await world.http.request(method, path, headers=headers)
            assert response.status_code == 404, (name, method, path, response.text)
            assert_problem(response, 404)

    return check()


def _outsiders_get_404(world: World, method: str, path: str, body: Any = None) -> Awaitable[None]:
    async def check() -> None:
        for name, headers in world.outsiders.items():
            response = await world.http.request(method, path, json=body, headers=headers)
            assert response.status_code == 404, (name, method, path, response.text)
            assert_problem(response, 404)
        await world.a_storage_intact()

    return check()


@row("POST", "/v1/storages")
async def _create_storage(world: World) -> None:
    body = {"storageID": unique("b-st"), "kind": "object", "sizeBytes": MIB}
    created = await world.http.post("/v1/storages", json=body, headers=bearer(world.b.admin_key))
    assert created.json()["tenantID"] == world.b.tenant_id, created.text
    smuggled = await world.http.post(
        "/v1/storages",
        json={**body, "storageID": unique("b-st"), "tenantID": world.a.tenant_id},
        headers=bearer(world.b.admin_key),
    )
    assert_problem(smuggled, 422)


@row("GET", "/v1/storages")
async def _list_storages(world: World) -> None:
    for headers in world.outsiders.values():
        items = (await world.http.get("/v1/storages", headers=headers)).json()["items"]
        assert items, "B has storages of its own"
        assert {item["tenantID"] for item in items} == {world.b.tenant_id}


@row("GET", "/v1/storages/{storage_id}")
async def _get_storage(world: World) -> None:
    await _outsiders_get_404(world, "GET", f"/v1/storages/{world.a_storage}")


@row("PATCH", "/v1/storages/{storage_id}")
async def _update_storage(world: World) -> None:
    path = f"/v1/storages/{world.a_storage}"
    await _outsiders_get_404(world, "PATCH", path, {"sizeBytes": 2 * MIB})


@row("DELETE", "/v1/storages/{storage_id}")
async def _delete_storage(world: World) -> None:
    await _outsiders_get_404(world, "DELETE", f"/v1/storages/{world.a_storage}?force=true")


@row("POST", "/v1/storages/{storage_id}/accessors")
async def _create_accessor(world: World) -> None:
    path = f"/v1/storages/{world.a_storage}/accessors"
    await _outsiders_get_404(world, "POST", path, {"mode": "read-write"})


@row("GET", "/v1/storages/{storage_id}/accessors")
async def _list_accessors(world: World) -> None:
    await _outsiders_get_404(world, "GET", f"/v1/storages/{world.a_storage}/accessors")


@row("DELETE", "/v1/storages/{storage_id}/accessors/{accessor_id}")
async def _delete_accessor(world: World) -> None:
    for storage in (world.a_storage, world.b_storage):
        path = f"/v1/storages/{storage}/accessors/{world.a_accessor}"
        await _outsiders_get_404(world, "DELETE", path)


@row("GET", "/v1/storages/{storage_id}/objects")
async def _list_objects(world: World) -> None:
    await _outsiders_get_404(world, "GET", f"/v1/storages/{world.a_storage}/objects")


@row("POST", "/v1/storages/{storage_id}/downloads")
async def _download(world: World) -> None:
    path = f"/v1/storages/{world.a_storage}/downloads"
    await _outsiders_get_404(world, "POST", path, {"key": "weights.bin"})


@row("POST", "/v1/storages/{storage_id}/download-urls")
async def _download_urls(world: World) -> None:
    path = f"/v1/storages/{world.a_storage}/download-urls"
    await _outsiders_get_404(world, "POST", path, {"keys": ["weights.bin"]})


@row("POST", "/v1/storages/{storage_id}/upload-urls")
async def _upload_urls(world: World) -> None:
    path = f"/v1/storages/{world.a_storage}/upload-urls"
    body = {"objects": [{"key": "weights.bin", "sizeBytes": 10}]}
    await _outsiders_get_404(world, "POST", path, body)


@row("POST", "/v1/storages/{storage_id}/uploads")
async def _upload(world: World) -> None:
    path = f"/v1/storages/{world.a_storage}/uploads"
    await _outsiders_get_404(world, "POST", path, {"key": "weights.bin"})


@row("POST", "/v1/storages/{storage_id}/uploads/{upload_id}/complete")
async def _complete_upload(world: World) -> None:
    body = {"parts": [{"partNumber": 1, "etag": "x"}]}
    for storage in (world.a_storage, world.b_storage):
        path = f"/v1/storages/{storage}/uploads/{world.a_upload}/complete"
        await _outsiders_get_404(world, "POST", path, body)


@row("POST", "/v1/storages/{storage_id}/uploads/{upload_id}/parts")
async def _presign_parts(world: World) -> None:
    body = {"partNumbers": [1]}
    for storage in (world.a_storage, world.b_storage):
        path = f"/v1/storages/{storage}/uploads/{world.a_upload}/parts"
        await _outsiders_get_404(world, "POST", path, body)


@row("POST", "/v1/storages/{storage_id}/revoke-urls")
async def _revoke_urls(world: World) -> None:
    await _outsiders_get_404(world, "POST", f"/v1/storages/{world.a_storage}/revoke-urls")


@row("DELETE", "/v1/storages/{storage_id}/uploads/{upload_id}")
async def _abort_upload(world: World) -> None:
    for storage in (world.a_storage, world.b_storage):
        await _outsiders_get_404(
            world, "DELETE", f"/v1/storages/{storage}/uploads/{world.a_upload}"
        )
    # A's upload is still open: A can abort it.
    aborted = await world.http.delete(
        f"/v1/storages/{world.a_storage}/uploads/{world.a_upload}",
        headers=bearer(world.a.admin_key),
    )
    assert aborted.status_code == 204, aborted.text


# --- monitoring ------------------------------------------------------------------------


@row("GET", "/v1/gpus")
async def _gpus(world: World) -> None:
    for headers in world.outsiders.values():
        listed = (await world.http.get("/v1/gpus", headers=headers)).json()
        assert world.a_gpu not in {gpu["gpuUUID"] for gpu in listed}


@row("GET", "/v1/gpus/{gpu_uuid}/metrics")
async def _gpu_metrics(world: World) -> None:
    await _outsiders_404(world, "GET", f"/v1/gpus/{world.a_gpu}/metrics")


@row("GET", "/v1/gpu-instances/{instance_id}/metrics")
async def _instance_metrics(world: World) -> None:
    # B has an instance of the same id, which never ran on a GPU: no metrics, never A's.
    path = f"/v1/gpu-instances/{world.a_instance}/metrics"
    await _outsiders_404(world, "GET", path)
    path += f"?tenantID={world.a.tenant_id}"
    await _outsiders_404(world, "GET", path)


@row("GET", "/v1/jobs/{job_id}/metrics")
async def _job_metrics(world: World) -> None:
    # B has a job of the same id, which never ran on a GPU: A's GPUs stay A's.
    await _workload_metrics(world, f"/v1/jobs/{world.a_job}/metrics")


@row("GET", "/v1/inference-services/{service_id}/metrics")
async def _service_metrics(world: World) -> None:
    await _workload_metrics(world, f"/v1/inference-services/{world.a_service}/metrics")


async def _workload_metrics(world: World, path: str) -> None:
    start = f"?start={(datetime.now(UTC) - timedelta(hours=1)).isoformat().replace('+00:00', 'Z')}"
    mine = await world.http.get(path + start, headers=bearer(world.a.admin_key))
    assert mine.status_code == 200, mine.text
    assert mine.json()["points"], mine.text
    await _outsiders_404(world, "GET", path + start)
    await _outsiders_404(world, "GET", f"{path}{start}&tenantID={world.a.tenant_id}")


@row("GET", "/v1/metrics/tenant")
async def _tenant_metrics(world: World) -> None:
    for headers in world.outsiders.values():
        for query in ("", f"?tenantID={world.a.tenant_id}"):
            found = await world.http.get(f"/v1/metrics/tenant{query}", headers=headers)
            assert found.json()["points"] == [], found.text


@row("GET", "/v1/nodes")
async def _nodes(world: World) -> None:
    await _everyone_refused(world, "GET", "/v1/nodes", lower_too=True)


@row("GET", "/v1/nodes/{node}/metrics")
async def _node_metrics(world: World) -> None:
    await _everyone_refused(world, "GET", f"/v1/nodes/{world.a_node}/metrics", lower_too=True)


@row("POST", "/v1/nodes/{node}/release")
async def _release_node(world: World) -> None:
    await _everyone_refused(world, "POST", f"/v1/nodes/{world.a_node}/release", lower_too=True)


@row("POST", "/v1/nodes/{node}/quarantine")
async def _quarantine_node(world: World) -> None:
    await _everyone_refused(
        world, "POST", f"/v1/nodes/{world.a_node}/quarantine", lower_too=True,
        body={"reason": "maintenance"},
    )  # fmt: skip


@row("GET", "/v1/fleet")
async def _fleet(world: World) -> None:
    await _everyone_refused(world, "GET", "/v1/fleet", lower_too=True)


@row("POST", "/v1/alert-rules")
async def _create_rule(world: World) -> None:
    body = {"name": "b", "metric": "power_w", "threshold": 1}
    refused(await world.http.post("/v1/alert-rules", json=body, headers=world.lower))
    refused(await world.http.post("/v1/alert-rules", json=body, headers=bearer(world.b_user_key)))
    created = await world.http.post("/v1/alert-rules", json=body, headers=bearer(world.b.admin_key))
    assert created.json()["tenantID"] == world.b.tenant_id, created.text
    node_rule = {**body, "node": world.a_node}  # node rules are the platform admin's
    refused(
        await world.http.post("/v1/alert-rules", json=node_rule, headers=bearer(world.b.admin_key))
    )


@row("GET", "/v1/alert-rules")
async def _list_rules(world: World) -> None:
    refused(await world.http.get("/v1/alert-rules", headers=world.lower))
    rules = (await world.http.get("/v1/alert-rules", headers=bearer(world.b.admin_key))).json()
    assert world.a_rule not in {rule["ruleID"] for rule in rules}


@row("GET", "/v1/alert-rules/{rule_id}")
async def _get_rule(world: World) -> None:
    await _everyone_refused(world, "GET", f"/v1/alert-rules/{world.a_rule}", lower_too=True)


@row("PATCH", "/v1/alert-rules/{rule_id}")
async def _update_rule(world: World) -> None:
    await _everyone_refused(
        world, "PATCH", f"/v1/alert-rules/{world.a_rule}", lower_too=True, body={"threshold": 99}
    )
    mine = await world.http.get(
        f"/v1/alert-rules/{world.a_rule}", headers=bearer(world.a.admin_key)
    )
    assert mine.json()["threshold"] == 10


@row("POST", "/v1/alert-rules/{rule_id}/webhook-secret")
async def _rotate_webhook_secret(world: World) -> None:
    path = f"/v1/alert-rules/{world.a_rule}/webhook-secret"
    await _everyone_refused(world, "POST", path, lower_too=True)


@row("DELETE", "/v1/alert-rules/{rule_id}")
async def _delete_rule(world: World) -> None:
    await _everyone_refused(world, "DELETE", f"/v1/alert-rules/{world.a_rule}", lower_too=True)
    mine = await world.http.get(
        f"/v1/alert-rules/{world.a_rule}", headers=bearer(world.a.admin_key)
    )
    assert mine.status_code == 200


@row("GET", "/v1/alerts")
async def _alerts(world: World) -> None:
    # The alert is back-dated, so A's live alerts list before it: asked for by its rule.
    of_rule: dict[str, str | int] = {"ruleID": world.a_rule, "limit": 500}
    for headers in world.outsiders.values():
        alerts = (await world.http.get("/v1/alerts", params=of_rule, headers=headers)).json()
        assert world.a_alert not in {alert["alertID"] for alert in alerts}
        assert alerts == [], alerts
    mine = (await world.http.get("/v1/alerts", params=of_rule, headers=world.lower)).json()
    assert world.a_alert in {alert["alertID"] for alert in mine}


@row("GET", "/v1/capacity")
async def _capacity(world: World) -> None:
    # For everyone: free GPUs by zone and type, naming no node, tenant or workload.
    for headers in (*world.outsiders.values(), world.lower):
        answer = await world.http.get("/v1/capacity", headers=headers)
        assert answer.status_code == 200, answer.text
        groups = answer.json()
        assert groups, "the fleet has GPUs"
        assert all(set(g) == {"zone", "gpuType", "freeByNode"} for g in groups), groups
        assert world.a_node not in answer.text
        assert world.a.tenant_id not in answer.text


@row("GET", "/v1/openapi.json")
async def _openapi(world: World) -> None:
    # Public, and the same for everyone: it describes the API, never a tenant's data.
    anonymous = await world.http.get("/v1/openapi.json")
    assert anonymous.status_code == 200
    assert world.a.tenant_id not in anonymous.text


@pytest.fixture
async def world(platform: Platform, kafka: KafkaConnection, kube: k8s.ApiClient) -> World:
    a = await platform.tenant(max_gpus=32)  # room for two pending 16-GPU instances
    b = await platform.tenant(max_gpus=16)
    spec = await platform.spec(gpus=1)
    big = await platform.spec(gpus=16)  # stays pending: no node has 16 GPUs
    started = await platform.http.post(
        "/v1/gpu-instances",
        json={
            "image": "jupyter",
            "specName": big,
            "template": {"ports": [{"port": 8888, "isPublic": True}]},
        },
        headers=bearer(a.admin_key),
    )
    assert started.status_code == 202, started.text
    only_a = await platform.http.post(
        "/v1/gpu-instances",
        json={"instanceID": unique("only-a"), "image": "jupyter", "specName": big},
        headers=bearer(a.admin_key),
    )
    assert only_a.status_code == 202, only_a.text
    _, _, a_user = await platform.member(a)
    _, _, b_user = await platform.member(b)
    budget = await platform.http.put(
        "/v1/budget", json={"monthlyBudgetCents": 10_000}, headers=bearer(a.admin_key)
    )
    assert budget.status_code == 200, budget.text
    invoice = await platform.http.post(
        "/v1/invoices", json={"tenantID": a.tenant_id, "period": "2026-01"}, headers=platform.admin
    )
    assert invoice.status_code == 201, invoice.text
    a_storage = (await platform.storage(a, size_bytes=256 * MIB))["storageID"]
    b_storage = (await platform.storage(b))["storageID"]
    accessor = await platform.http.post(
        f"/v1/storages/{a_storage}/accessors", json={"mode": "read-write"},
        headers=bearer(a.admin_key),
    )  # fmt: skip
    upload = await platform.http.post(
        f"/v1/storages/{a_storage}/uploads", json={"key": "big.bin", "sizeBytes": 100 * MIB},
        headers=bearer(a.admin_key),
    )  # fmt: skip
    assert upload.json()["uploadID"], upload.text
    jobs, a_service = [unique("a-job"), unique("only-a-job")], unique("a-svc")
    a_gpu, a_node, a_rule, a_alert = await gpu_history(
        platform, a, kafka, kube, started.json()["instanceID"],
        job_workload_id(jobs[0]), service_workload_id(a_service),
    )  # fmt: skip
    for job_id in jobs:
        # Runs long enough to be running, and billed, through the whole matrix.
        body = {"jobID": job_id, "image": "busybox", "specName": spec,
                "env": [{"name": "GPUCLOUD_SIM_RUN_FOR", "value": "600s"}]}  # fmt: skip
        submitted = await platform.http.post("/v1/jobs", json=body, headers=bearer(a.admin_key))
        assert submitted.status_code == 202, submitted.text
    service = await platform.http.post(
        "/v1/inference-services",
        json={"serviceID": a_service, "image": A_SERVICE_IMAGE, "specName": spec, "port": 8000},
        headers=bearer(a.admin_key),
    )
    assert service.status_code == 201, service.text
    a_credential = unique("a-cred")
    credential = await platform.http.post(
        "/v1/registry-credentials",
        json={"credentialID": a_credential, "registry": A_REGISTRY, "username": "a-user",
              "password": "a-password"},
        headers=bearer(a.admin_key),
    )  # fmt: skip
    assert credential.status_code == 201, credential.text
    return World(
        platform.http, a, started.json()["instanceID"], a_user, b, b_user, spec,
        invoice.json()["invoiceID"], only_a.json()["instanceID"], a_storage,
        accessor.json()["accessorID"], upload.json()["uploadID"], b_storage,
        a_gpu, a_node, a_rule, a_alert, jobs[0], jobs[1], a_service, a_credential,
    )  # fmt: skip


# On both object stores: the storage rows' refusals come before the store is reached,
# but their setup (accessors, uploads) goes through it.
@pytest.mark.object_store
async def test_every_endpoint_refuses_other_tenants_and_lower_roles(world: World) -> None:
    for (method, path), check in MATRIX.items():
        try:
            await check(world)
        except AssertionError as error:
            raise AssertionError(f"{method} {path}: {error}") from error


async def test_the_matrix_covers_every_public_operation(platform: Platform) -> None:
    document = (await platform.http.get("/v1/openapi.json")).json()
    assert "x-gpucloud-unavailable-services" not in document
    operations = {
        (method.upper(), path)
        for path, item in document["paths"].items()
        for method in item
        if method in {"get", "post", "put", "patch", "delete"}
    }
    assert operations == set(MATRIX), {
        "missing rows": sorted(operations - set(MATRIX)),
        "stale rows": sorted(set(MATRIX) - operations),
    }
