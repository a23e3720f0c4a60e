"""The gateway over the real stack: tenants and their events, users, API keys, tokens,
roles and scopes, rate limits, the audit log, and forwarding with a signed identity."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from kubernetes_asyncio import client as k8s
from pymongo import AsyncMongoClient

from gpucloud_libs.identity import IDENTITY_HEADER, IdentitySigner, generate_key_pair
from gpucloud_libs.kafka_connection import KafkaConnection
from gpucloud_libs.naming import tenant_namespace
from gpucloud_libs.topics import AUDIT, TENANTS

from .platform import Platform, assert_problem, bearer
from .support import eventually, read_topic

Mongo = AsyncMongoClient[dict[str, object]]


def _events_of(records: list[Any], key: str) -> list[dict[str, Any]]:
    found = []
    for record in records:
        if record.key == key.encode():
            headers = {name: value.decode() for name, value in record.headers}
            found.append({"type": headers["ce_type"], **json.loads(record.value)})
    return found


async def test_tenant_changes_are_published_and_enforced(
    platform: Platform, kafka: KafkaConnection, kube: k8s.ApiClient
) -> None:
    account = await platform.tenant(max_gpus=16, max_instances=4)
    tenant = bearer(account.admin_key)

    # The tenant admin tightens the quota within the platform's limits...
    own = await platform.http.put("/v1/tenant/quota", json={"maxGpus": 8}, headers=tenant)
    assert own.status_code == 200, own.text
    assert own.json()["quota"]["maxGpus"] == 8
    assert own.json()["limits"]["maxGpus"] == 16
    # ...but not above them.
    above = await platform.http.put("/v1/tenant/quota", json={"maxGpus": 17}, headers=tenant)
    assert_problem(above, 422, "validation_failed")

    # The platform admin lowers a limit below the tenant's own: the tighter one wins.
    changed = await platform.http.patch(
        f"/v1/tenants/{account.tenant_id}", json={"limits": {"maxGpus": 4, "maxInstances": 4,
        "maxStorageBytes": 10**12}}, headers=platform.admin,
    )  # fmt: skip
    assert changed.status_code == 200, changed.text
    assert changed.json()["quota"]["maxGpus"] == 4

    # The queue weight: the platform admin's, within (0, 100], published with the quota.
    for weight in (0, -1, 101):
        refused = await platform.http.patch(
            f"/v1/tenants/{account.tenant_id}", json={"queueWeight": weight},
            headers=platform.admin,
        )  # fmt: skip
        assert_problem(refused, 422, "validation_failed")
    assert_problem(
        await platform.http.patch(
            f"/v1/tenants/{account.tenant_id}", json={"queueWeight": 2}, headers=tenant
        ),
        403,
    )
    weighted = await platform.http.patch(
        f"/v1/tenants/{account.tenant_id}", json={"queueWeight": 2.5}, headers=platform.admin
    )
    assert weighted.json()["queueWeight"] == 2.5, weighted.text

    records = await read_topic(kafka, TENANTS.name, expect=10_000, timeout=3)
    events = _events_of(records, account.tenant_id)
    assert [event["quota"]["max_gpus"] for event in events] == [16, 8, 4, 4]
    assert [event["queue_weight"] for event in events] == [1.0, 1.0, 1.0, 2.5]
    assert {event["type"] for event in events} == {"io.gpucloud.tenant.upserted.v1"}

    # The instances service enforces what was published: the namespace quota follows.
    core = k8s.CoreV1Api(kube)
    namespace = tenant_namespace(account.tenant_id)

    async def gpu_quota() -> bool:
        try:
            quota = await core.read_namespaced_resource_quota("gpucloud-quota", namespace)
        except k8s.ApiException:
            return False
        return bool(quota.spec.hard["requests.nvidia.com/gpu"] == "4")

    await eventually(gpu_quota, timeout=30)

    deleted = await platform.http.delete(f"/v1/tenants/{account.tenant_id}", headers=platform.admin)
    assert deleted.status_code == 204
    assert_problem(await platform.http.get("/v1/whoami", headers=tenant), 401, "unauthenticated")
    records = await read_topic(kafka, TENANTS.name, expect=10_000, timeout=3)
    assert _events_of(records, account.tenant_id)[-1]["type"] == "io.gpucloud.tenant.deleted.v1"


async def test_api_key_secret_is_shown_once_and_stored_hashed(
    platform: Platform, mongo: Mongo
) -> None:
    account = await platform.tenant()
    created = await platform.http.post(
        "/v1/api-keys", json={"name": "ci"}, headers=bearer(account.admin_key)
    )
    assert created.status_code == 201
    key = created.json()
    assert key["secret"].startswith(f"gpc_{key['keyID']}_")

    shown = await platform.http.get(f"/v1/api-keys/{key['keyID']}", headers=bearer(key["secret"]))
    assert shown.status_code == 200
    assert "secret" not in shown.json()
    stored = await mongo["gpucloud_gateway"]["keys"].find_one({"_id": key["keyID"]})
    assert stored is not None
    assert key["secret"] not in json.dumps(stored, default=str)
    assert key["secret"].split("_", 2)[2] not in json.dumps(stored, default=str)

    async def last_used() -> bool:
        listed = await platform.http.get(
            f"/v1/api-keys/{key['keyID']}", headers=bearer(account.admin_key)
        )
        return listed.json()["lastUsedAt"] is not None

    await eventually(last_used, timeout=10)


async def test_revoked_and_expired_keys_stop_working(platform: Platform) -> None:
    account = await platform.tenant()
    admin = bearer(account.admin_key)
    soon = (datetime.now(UTC) + timedelta(seconds=2)).isoformat()
    short = (await platform.http.post(
        "/v1/api-keys", json={"name": "short", "expiresAt": soon}, headers=admin
    )).json()  # fmt: skip
    revocable = (await platform.http.post("/v1/api-keys", json={"name": "r"}, headers=admin)).json()

    assert (
        await platform.http.get("/v1/whoami", headers=bearer(short["secret"]))
    ).status_code == 200
    assert (
        await platform.http.get("/v1/whoami", headers=bearer(revocable["secret"]))
    ).status_code == 200

    revoked = await platform.http.delete(f"/v1/api-keys/{revocable['keyID']}", headers=admin)
    assert revoked.status_code == 200
    assert revoked.json()["revokedAt"] is not None
    body = assert_problem(
        await platform.http.get("/v1/whoami", headers=bearer(revocable["secret"])), 401
    )
    assert "revoked" in body["detail"]

    await asyncio.sleep(2.5)
    body = assert_problem(
        await platform.http.get("/v1/whoami", headers=bearer(short["secret"])), 401
    )
    assert "expired" in body["detail"]

    past = (datetime.now(UTC) - timedelta(seconds=1)).isoformat()
    refused = await platform.http.post(
        "/v1/api-keys", json={"name": "p", "expiresAt": past}, headers=admin
    )
    assert_problem(refused, 422)
    far = (datetime.now(UTC) + timedelta(days=400)).isoformat()
    refused = await platform.http.post(
        "/v1/api-keys", json={"name": "f", "expiresAt": far}, headers=admin
    )
    assert_problem(refused, 422)

    wrong = account.admin_key[:-4] + "AAAA"
    assert_problem(await platform.http.get("/v1/whoami", headers=bearer(wrong)), 401)
    assert_problem(await platform.http.get("/v1/whoami"), 401)


async def test_scopes_and_roles_limit_what_a_key_does(platform: Platform) -> None:
    account = await platform.tenant()
    _, _, reader = await platform.member(account, scopes=["instances:read"])
    assert (await platform.http.get("/v1/gpu-instances", headers=bearer(reader))).status_code == 200
    create = await platform.http.post(
        "/v1/gpu-instances", json={"image": "x", "specName": "nope"}, headers=bearer(reader)
    )
    assert_problem(create, 403, "insufficient_scope")
    assert_problem(
        await platform.http.post("/v1/api-keys", json={"name": "k"}, headers=bearer(reader)),
        403,
        "insufficient_scope",
    )

    _, _, member = await platform.member(account)
    member_headers = bearer(member)
    # A tenant user cannot mint an admin key, nor a key with scopes it lacks.
    upward = await platform.http.post(
        "/v1/api-keys", json={"name": "k", "role": "tenant-admin"}, headers=member_headers
    )
    assert_problem(upward, 403)
    wider = await platform.http.post(
        "/v1/api-keys", json={"name": "k", "scopes": ["admin:write"]}, headers=bearer(reader)
    )
    assert_problem(wider, 403)
    # Tenant users do not manage users, tenants, specs or stocks.
    for method, path in [
        ("GET", "/v1/users"),
        ("POST", "/v1/users"),
        ("GET", "/v1/audit"),
        ("PUT", "/v1/tenant/quota"),
        ("GET", "/v1/tenants"),
        ("POST", "/v1/specs"),
        ("GET", "/v1/stocks"),
    ]:
        response = await platform.http.request(method, path, json={}, headers=member_headers)
        assert_problem(response, 403)
    # A tenant admin cannot make a platform admin.
    escalate = await platform.http.post(
        "/v1/users",
        json={"email": "root@evil.test", "name": "x", "role": "platform-admin"},
        headers=bearer(account.admin_key),
    )
    assert_problem(escalate, 403)


async def test_password_sign_in_and_disabled_users(platform: Platform) -> None:
    account = await platform.tenant(password="a long admin password")
    user_id, _, key = await platform.member(account)
    email = f"admin@{account.tenant_id}.test"

    wrong = await platform.http.post("/v1/tokens", json={"email": email, "password": "nope"})
    assert_problem(wrong, 401)
    signed_in = await platform.http.post(
        "/v1/tokens", json={"email": email, "password": "a long admin password", "ttlS": 120}
    )
    assert signed_in.status_code == 201
    token = signed_in.json()["token"]
    assert token.startswith("gpt_")
    me = await platform.http.get("/v1/whoami", headers=bearer(token))
    assert me.json()["role"] == "tenant-admin"
    assert me.json()["via"] == "token"

    # A forged token fails; so does one whose signature was tampered with.
    payload, _, _ = token.partition(".")
    assert_problem(await platform.http.get("/v1/whoami", headers=bearer(payload + ".x")), 401)

    disabled = await platform.http.patch(
        f"/v1/users/{user_id}", json={"status": "disabled"}, headers=bearer(token)
    )
    assert disabled.status_code == 200
    assert_problem(await platform.http.get("/v1/whoami", headers=bearer(key)), 401)
    selfish = await platform.http.patch(
        f"/v1/users/{account.admin_user_id}", json={"status": "disabled"}, headers=bearer(token)
    )
    assert_problem(selfish, 422)


async def test_rate_limits_per_tenant_and_per_key(platform: Platform) -> None:
    account = await platform.tenant(rate_limit={"requestsPerS": 1, "burst": 3})
    headers = bearer(account.admin_key)
    statuses = [
        (await platform.http.get("/v1/whoami", headers=headers)).status_code for _ in range(4)
    ]
    assert statuses[:3] == [200, 200, 200]
    limited = await platform.http.get("/v1/whoami", headers=headers)
    body = assert_problem(limited, 429, "rate_limited")
    assert int(limited.headers["Retry-After"]) >= 1
    assert body["limit"] == "this tenant"

    # Per key: a generous tenant, and one key hammered past its own bucket (50/s, burst
    # 100). How many calls a loaded machine gets through per second varies, so the
    # calls go on in rounds until one is throttled, and the number let through is held
    # to what the bucket allows in the time taken.
    roomy = await platform.tenant(rate_limit={"requestsPerS": 10_000, "burst": 10_000})
    key_headers = bearer(roomy.admin_key)
    responses: list[httpx.Response] = []
    began = time.monotonic()
    while not any(r.status_code == 429 for r in responses) and len(responses) < 5_000:
        responses += await asyncio.gather(
            *(platform.http.get("/v1/whoami", headers=key_headers) for _ in range(60))
        )
    elapsed = time.monotonic() - began
    throttled = [r for r in responses if r.status_code == 429]
    assert throttled
    assert {r.json()["limit"] for r in throttled} == {"this API key"}
    assert all(r.status_code in {200, 429} for r in responses)
    let_through = sum(r.status_code == 200 for r in responses)
    assert let_through <= 100 + 50 * elapsed + 1


async def test_mutating_calls_are_audited_and_published(
    platform: Platform, kafka: KafkaConnection
) -> None:
    first, second = await platform.tenant(), await platform.tenant()
    headers = bearer(first.admin_key)
    created = await platform.http.post("/v1/api-keys", json={"name": "audited"}, headers=headers)
    key_id = created.json()["keyID"]
    await platform.http.delete(f"/v1/api-keys/{key_id}", headers=headers)
    refused = await platform.http.post("/v1/specs", json={}, headers=headers)
    assert refused.status_code == 403
    await platform.http.post(
        "/v1/api-keys", json={"name": "other"}, headers=bearer(second.admin_key)
    )

    page = (await platform.http.get("/v1/audit", headers=headers)).json()
    entries = [(e["action"], e["resource"], e["result"]) for e in page["items"]]
    assert entries[:3] == [
        ("POST /v1/specs", "/v1/specs", 403),
        ("DELETE /v1/api-keys/{key_id}", f"/v1/api-keys/{key_id}", 200),
        ("POST /v1/api-keys", "/v1/api-keys", 201),
    ]
    assert {e["tenantID"] for e in page["items"]} == {first.tenant_id}
    assert {e["actor"] for e in page["items"][:3]} == {first.admin_user_id}
    # The platform's own action on the tenant is in the tenant's log too.
    assert page["items"][-1]["action"] == "POST /v1/tenants"

    # Another tenant's admin asking for this tenant's log still gets only their own.
    other = await platform.http.get(
        "/v1/audit", params={"tenantID": first.tenant_id}, headers=bearer(second.admin_key)
    )
    assert {e["tenantID"] for e in other.json()["items"]} == {second.tenant_id}
    # The platform admin reads any tenant's.
    as_admin = await platform.http.get(
        "/v1/audit", params={"tenantID": first.tenant_id, "limit": 2}, headers=platform.admin
    )
    assert [e["action"] for e in as_admin.json()["items"]] == [
        "POST /v1/specs",
        "DELETE /v1/api-keys/{key_id}",
    ]
    assert as_admin.json()["nextCursor"]
    following = await platform.http.get(
        "/v1/audit",
        params={"tenantID": first.tenant_id, "limit": 2, "cursor": as_admin.json()["nextCursor"]},
        headers=platform.admin,
    )
    assert following.json()["items"][0]["action"] == "POST /v1/api-keys"
    assert_problem(
        await platform.http.get("/v1/audit", params={"cursor": "garbage!"}, headers=headers), 400
    )

    async def published() -> list[dict[str, Any]]:
        records = await read_topic(kafka, AUDIT.name, expect=100_000, timeout=2)
        return [e for e in _events_of(records, first.tenant_id) if e["resource"] == "/v1/specs"]

    [event] = await eventually(published, timeout=20)
    assert event["result"] == 403
    assert event["actor"] == first.admin_user_id


async def test_forwarded_calls_carry_the_gateways_identity_only(
    platform: Platform, stack_env: dict[str, str], gateway_signer: IdentitySigner
) -> None:
    victim, attacker = await platform.tenant(), await platform.tenant()
    # A caller's own identity header is dropped: the service sees who the gateway says.
    forged = IdentitySigner("gateway", generate_key_pair()[0], setting="-").sign(
        subject="x", role="tenant-admin", tenant_id=victim.tenant_id,
        audience="instances", method="GET", path="/gpu-instances",
    )  # fmt: skip
    listed = await platform.http.get(
        "/v1/gpu-instances", headers={**bearer(attacker.admin_key), IDENTITY_HEADER: forged}
    )
    assert listed.status_code == 200
    # Forged with the real key, it is still dropped.
    real = gateway_signer.sign(
        subject="x", role="tenant-admin", tenant_id=victim.tenant_id,
        audience="instances", method="POST", path="/gpu-instances",
    )  # fmt: skip
    spec = await platform.spec()
    started = await platform.http.post(
        "/v1/gpu-instances",
        json={"image": "busybox", "specName": spec},
        headers={**bearer(attacker.admin_key), IDENTITY_HEADER: real},
    )
    assert started.status_code == 202, started.text
    assert started.json()["tenantID"] == attacker.tenant_id
    # The tenant never comes from the body.
    smuggled = await platform.http.post(
        "/v1/gpu-instances",
        json={"image": "busybox", "specName": spec, "tenantID": victim.tenant_id},
        headers=bearer(attacker.admin_key),
    )
    assert_problem(smuggled, 422, "validation_failed")

    # The services refuse calls that skip the gateway.
    async with httpx.AsyncClient(base_url=stack_env["GPUCLOUD_INSTANCES_URL"]) as direct:
        assert_problem(await direct.get("/gpu-instances"), 401)
        assert_problem(await direct.get("/gpu-instances", headers={IDENTITY_HEADER: forged}), 401)


async def test_unknown_routes_methods_and_big_bodies_get_problems(platform: Platform) -> None:
    assert_problem(await platform.http.get("/v1/nothing-here", headers=platform.admin), 404)
    wrong_method = await platform.http.put("/v1/specs", headers=platform.admin)
    assert_problem(wrong_method, 405, "method_not_allowed")
    assert wrong_method.headers["Allow"] == "GET, POST"
    huge = await platform.http.post(
        "/v1/specs",
        content=b"{" + b" " * (9 * 2**20) + b"}",
        headers={**platform.admin, "content-type": "application/json"},
    )
    assert_problem(huge, 413, "payload_too_large")
    # NUL characters: refused in URLs and in bodies (the store could not hold them).
    assert_problem(await platform.http.get("/v1/users/a%00b", headers=platform.admin), 400)
    nul_body = await platform.http.post(
        "/v1/specs", json={"name": "a", "cpu": "1", "memory": "1Gi", "gpuType": "x\u0000",
        "gpuNum": 1}, headers=platform.admin,
    )  # fmt: skip
    assert_problem(nul_body, 422, "validation_failed")
    not_json = await platform.http.post(
        "/v1/tenants", content=b"{", headers={**platform.admin, "content-type": "application/json"}
    )
    assert_problem(not_json, 422)


async def test_a_failed_tenant_creation_leaves_the_id_free(platform: Platform) -> None:
    taken = await platform.tenant()
    body = {
        "tenantID": f"{taken.tenant_id}-b",
        "name": "B",
        "limits": {"maxGpus": 1, "maxInstances": 1, "maxStorageBytes": 1},
        "admin": {"email": f"admin@{taken.tenant_id}.test", "name": "x", "role": "tenant-admin"},
    }
    assert_problem(await platform.http.post("/v1/tenants", json=body, headers=platform.admin), 409)
    body["admin"] = {"email": f"other@{taken.tenant_id}.test", "name": "x", "role": "tenant-admin"}
    retried = await platform.http.post("/v1/tenants", json=body, headers=platform.admin)
    assert retried.status_code == 201, retried.text
    platform.tenants.append(body["tenantID"])  # type: ignore[arg-type]


async def test_an_idle_connection_outlives_the_clients_own_pool_expiry(
    stack_env: dict[str, str],
) -> None:
    """httpx drops an idle pooled connection after 5 s: were the gateway to close it at the
    same moment, a client reusing it would get no answer at all ("Server disconnected").
    The gateway keeps it open longer, so a request sent after 6 s idle is answered."""
    url = httpx.URL(stack_env["GPUCLOUD_GATEWAY_URL"])
    reader, writer = await asyncio.open_connection(url.host, url.port)
    request = f"GET /healthz HTTP/1.1\r\nHost: {url.host}\r\n\r\n".encode()
    try:
        for pause in (0.0, 6.0):
            await asyncio.sleep(pause)
            writer.write(request)
            await writer.drain()
            status = await asyncio.wait_for(reader.readline(), timeout=10)
            assert status.startswith(b"HTTP/1.1 200"), (pause, status)
            headers = await reader.readuntil(b"\r\n\r\n")
            length = next(
                int(line.split(b":")[1])
                for line in headers.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            await reader.readexactly(length)
    finally:
        writer.close()
