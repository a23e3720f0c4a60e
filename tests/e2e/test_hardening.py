"""Smaller holes below the API: path decoding through the gateway, sign-in timing."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
import secrets
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from gpucloud_gateway import credentials
from gpucloud_gateway.security_headers import SecurityHeaders
from gpucloud_gateway.settings import GatewaySettings
from gpucloud_libs.identity import IDENTITY_HEADER, IdentitySigner, b64, generate_key_pair
from gpucloud_stack import layout

from .conftest import stack_service_env
from .platform import Platform, assert_problem, bearer
from .support import eventually, unique


async def test_a_double_encoded_slash_stays_inside_its_path_segment(platform: Platform) -> None:
    """The gateway decodes a path once to match its route; the service must see the same
    path, not decode `%252F` a second time into a `/` that reaches another route."""
    account = await platform.tenant()
    response = await platform.http.get(
        "/v1/storages/a%252F..%252Fattachments", headers=bearer(account.admin_key)
    )
    body = assert_problem(response, 404, "not_found")
    assert body["detail"] == "storage 'a%2F..%2Fattachments' does not exist"


def test_an_unknown_email_costs_the_same_scrypt_as_a_known_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stored = credentials.hash_password("correct horse battery")
    real_scrypt = hashlib.scrypt
    calls: list[int] = []

    def counted(*args: Any, **kwargs: Any) -> bytes:
        calls.append(1)
        return real_scrypt(*args, **kwargs)

    credentials.sign_in_matches("warm the stand-in hash up", None)
    monkeypatch.setattr(hashlib, "scrypt", counted)
    assert credentials.sign_in_matches("correct horse battery", stored)
    assert not credentials.sign_in_matches("wrong", stored)
    assert not credentials.sign_in_matches("correct horse battery", None)
    assert len(calls) == 3  # one each: a miss does the work a hit does


async def _token(platform: Platform, **body: Any) -> dict[str, str]:
    headers = body.pop("headers", {})
    response = await platform.http.post("/v1/tokens", json=body, headers=headers)
    assert response.status_code == 201, response.text
    return bearer(response.json()["token"])


async def test_a_token_acts_as_its_user_is_now_not_as_it_was_when_minted(
    platform: Platform,
) -> None:
    account = await platform.tenant()
    admin = bearer(account.admin_key)
    email, password = f"{unique('lead')}@{account.tenant_id}.test", "correct horse battery"
    created = await platform.http.post(
        "/v1/users",
        json={"email": email, "name": "Lead", "role": "tenant-admin", "password": password},
        headers=admin,
    )
    assert created.status_code == 201, created.text
    token = await _token(platform, email=email, password=password)
    assert (await platform.http.get("/v1/whoami", headers=token)).json()["role"] == "tenant-admin"

    demoted = await platform.http.patch(
        f"/v1/users/{created.json()['userID']}", json={"role": "tenant-user"}, headers=admin
    )
    assert demoted.status_code == 200, demoted.text

    async def demoted_role() -> bool:
        me = await platform.http.get("/v1/whoami", headers=token)
        return bool(me.json()["role"] == "tenant-user")

    await eventually(demoted_role, timeout=10)  # the gateway caches users for 2 s
    new_user = {"email": f"x@{account.tenant_id}.test", "name": "X", "role": "tenant-user"}
    assert_problem(await platform.http.post("/v1/users", json=new_user, headers=token), 403)


async def test_a_password_reset_ends_the_users_tokens_and_console_sessions(
    platform: Platform,
) -> None:
    """An admin resetting a user's password locks out whoever signed in with the old
    one: its tokens and its console session, not only new sign-ins (review L1)."""
    account = await platform.tenant()
    admin = bearer(account.admin_key)
    email, old = f"{unique('reset')}@{account.tenant_id}.test", "the old pass phrase"
    created = await platform.http.post(
        "/v1/users",
        json={"email": email, "name": "Reset", "role": "tenant-user", "password": old},
        headers=admin,
    )
    assert created.status_code == 201, created.text
    token = await _token(platform, email=email, password=old)
    console = httpx.AsyncClient(base_url=platform.http.base_url)
    try:
        signed_in = await console.post(
            "/v1/console/session", json={"email": email, "password": old}
        )
        assert signed_in.status_code in {200, 201}, signed_in.text
        assert (await console.get("/v1/console/session")).status_code == 200
        reset = await platform.http.patch(
            f"/v1/users/{created.json()['userID']}",
            json={"password": "a new pass phrase"},
            headers=admin,
        )
        assert reset.status_code == 200, reset.text

        async def ended() -> bool:
            me = await platform.http.get("/v1/whoami", headers=token)
            return me.status_code == 401

        await eventually(ended, timeout=10)  # users are cached for 2 s
        refused = await platform.http.get("/v1/whoami", headers=token)
        assert "password has changed" in assert_problem(refused, 401)["detail"]
        assert_problem(await console.get("/v1/console/session"), 401)
        fresh = await _token(platform, email=email, password="a new pass phrase")
        assert (await platform.http.get("/v1/whoami", headers=fresh)).status_code == 200
    finally:
        await console.aclose()


async def test_a_token_minted_from_a_key_dies_when_the_key_expires(platform: Platform) -> None:
    account = await platform.tenant()
    soon = (datetime.now(UTC) + timedelta(seconds=3)).isoformat()
    key = await platform.http.post(
        "/v1/api-keys", json={"name": "short", "expiresAt": soon}, headers=bearer(account.admin_key)
    )
    assert key.status_code == 201, key.text
    token = await _token(platform, headers=bearer(key.json()["secret"]))
    assert (await platform.http.get("/v1/whoami", headers=token)).status_code == 200

    async def refused() -> dict[str, Any] | None:
        response = await platform.http.get("/v1/whoami", headers=token)
        return response.json() if response.status_code == 401 else None

    body = await eventually(refused, timeout=15)
    assert "expired" in body["detail"]


_PRIVATE, _PUBLIC = generate_key_pair()
_GOOD = {
    "GPUCLOUD_IDENTITY_PUBLIC_KEYS": json.dumps({"gateway": _PUBLIC}),
    "GPUCLOUD_IDENTITY_PRIVATE_KEY": _PRIVATE,
    "GPUCLOUD_SESSION_SECRET": "Kq3v9ZrT1mXwYb7LpN2sHd8FjC4gAe6U",
    "GPUCLOUD_KAFKA_USERNAME": "gpucloud-metering",
    "GPUCLOUD_KAFKA_PASSWORD": "Zt8wQm2Lx5Vr9Kc3Jn7Hb4Fd6Gs1Ap0Y",
}


@pytest.mark.parametrize(
    ("service", "setting", "value", "says"),
    [
        ("metering", "GPUCLOUD_IDENTITY_PUBLIC_KEYS", "{}", "has no key for 'gateway'"),
        ("metering", "GPUCLOUD_IDENTITY_PUBLIC_KEYS", '{"gateway": "change-me"}', "is not a base64url Ed25519 key"),
        ("gateway", "GPUCLOUD_IDENTITY_PRIVATE_KEY", "", "is not set"),
        ("gateway", "GPUCLOUD_SESSION_SECRET", "change-me", "is a placeholder"),
        ("metering", "GPUCLOUD_KAFKA_PASSWORD", "change-me", "is a placeholder"),
        ("storage", "GPUCLOUD_S3_SECRET_KEY", "minioadmin", "is a placeholder"),
        ("gateway", "GPUCLOUD_SESSION_SECRET", "a" * 64, "is a placeholder"),
        ("gateway", "GPUCLOUD_SESSION_SECRET", "Sh0rt-but-random", "is 16 characters, too short"),
        ("gateway", "GPUCLOUD_BOOTSTRAP_ADMIN_KEY", "gpc_bootstrap_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "'s secret is a placeholder"),
        ("gateway", "GPUCLOUD_BOOTSTRAP_ADMIN_KEY", "gpc_bootstrap_Sh0rt-but-random", "'s secret is 16 characters, too short"),
        ("gateway", "GPUCLOUD_BOOTSTRAP_ADMIN_KEY", "Kq3v9ZrT1mXwYb7LpN2sHd8FjC4gAe6U", "must read gpc_bootstrap_"),
    ],
)  # fmt: skip
def test_a_service_will_not_start_with_an_unusable_key(
    service: str, setting: str, value: str, says: str
) -> None:
    """It stops before connecting anywhere (no stack needed), naming the setting."""
    env = {**os.environ, **_GOOD, setting: value, "GPUCLOUD_HTTP_PORT": "18999"}
    done = subprocess.run(
        [sys.executable, "-m", f"gpucloud_{service}"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode != 0
    separator = "" if says.startswith("'") else " "  # `SETTING's secret …`
    assert f"{setting}{separator}{says}" in done.stdout + done.stderr


async def test_a_tenant_holds_at_most_100_alert_rules(platform: Platform) -> None:
    account = await platform.tenant()
    admin = bearer(account.admin_key)
    rule = {"name": "never", "metric": "temperature_c", "threshold": 10_000, "durationS": 60}

    async def create() -> Any:
        while True:  # the key's rate limit (bursts of 100) may ask to wait a moment
            response = await platform.http.post("/v1/alert-rules", json=rule, headers=admin)
            if response.status_code != 429:
                return response
            await asyncio.sleep(float(response.headers["Retry-After"]))

    created: list[str] = []
    try:
        for _ in range(100):
            response = await create()
            assert response.status_code == 201, response.text
            created.append(response.json()["ruleID"])
        body = assert_problem(await create(), 422, "quota_exceeded")
        assert (body["limit"], body["limit_value"], body["in_use"]) == (
            "max_rules_per_tenant", 100, 100
        )  # fmt: skip
    finally:
        # Every rule is evaluated on every sample: leave none behind.
        for rule_id in created:
            await platform.http.delete(f"/v1/alert-rules/{rule_id}", headers=admin)


@pytest.mark.parametrize("service", ["GATEWAY", "INSTANCES", "STORAGE", "METERING", "MONITORING"])
async def test_readiness_details_are_for_direct_callers_only(
    stack_env: dict[str, str], service: str
) -> None:
    """Through a proxy (the ingress adds X-Forwarded-For), /readyz says ready or not, and
    nothing about internal hosts; the probes, calling directly, still get the checks."""
    async with httpx.AsyncClient(base_url=stack_env[f"GPUCLOUD_{service}_URL"]) as http:
        direct = (await http.get("/readyz")).json()
        proxied = (await http.get("/readyz", headers={"X-Forwarded-For": "203.0.113.9"})).json()
    assert direct["status"] == "ready"
    assert "mongodb" in direct["checks"]
    assert proxied == {"status": "ready"}


async def test_a_service_takes_only_identities_the_gateway_signed_for_that_request(
    stack_env: dict[str, str], gateway_signer: IdentitySigner
) -> None:
    """Calls that skip the gateway: the old shared-key format, a token replayed as it
    was or on another route, and a platform admin signed by a service are all refused."""
    instances_key = stack_service_env("instances")["GPUCLOUD_IDENTITY_PRIVATE_KEY"]
    instances_signer = IdentitySigner("instances", instances_key, setting="-")
    claims = {"subject": "x", "role": "platform-admin", "tenant_id": None, "expires_at": 4e9}
    payload = b64(json.dumps(claims).encode())
    shared_key = b64(hmac.new(b"k" * 48, payload.encode(), hashlib.sha256).digest())

    def as_admin(
        signer: IdentitySigner, method: str, *, audience: str = "instances", body: bytes = b""
    ) -> str:
        return signer.sign(
            subject="x", role="platform-admin", tenant_id=None, audience=audience,
            method=method, path="/specs", body=body,
        )  # fmt: skip

    listing = as_admin(gateway_signer, "GET")
    refused = {
        "old shared-key token": f"{payload}.{shared_key}",
        "replayed on another path": listing,
        "signed for another body": as_admin(gateway_signer, "POST", body=b'{"name": "harmless"}'),
        "signed for another service": as_admin(gateway_signer, "POST", audience="metering"),
        "platform admin from a service": as_admin(instances_signer, "POST"),
    }
    async with httpx.AsyncClient(base_url=stack_env["GPUCLOUD_INSTANCES_URL"]) as direct:
        assert (await direct.get("/specs", headers={IDENTITY_HEADER: listing})).status_code == 200
        # Good once (review M6): the same request again, as sniffed, is refused.
        replayed = await direct.get("/specs", headers={IDENTITY_HEADER: listing})
        assert "already used" in assert_problem(replayed, 401, "unauthenticated")["detail"]
        for why, token in refused.items():
            response = await direct.post(
                "/specs",
                json={
                    "name": unique("s"),
                    "cpu": "1",
                    "memory": "1Gi",
                    "gpuType": "x",
                    "gpuNum": 1,
                },
                headers={IDENTITY_HEADER: token},
            )
            assert response.status_code == 401, why
            assert_problem(response, 401, "unauthenticated")


async def test_a_services_key_signs_only_for_the_routes_that_service_calls(
    stack_env: dict[str, str],
) -> None:
    """The instances service's key, used for a tenant, reaches the storage service's two
    routes it calls, and no other route of any service (review M1)."""
    instances_key = stack_service_env("instances")["GPUCLOUD_IDENTITY_PRIVATE_KEY"]
    signer = IdentitySigner("instances", instances_key, setting="-")

    def as_tenant(service: str, method: str, path: str, body: bytes) -> dict[str, str]:
        token = signer.sign(
            subject="x", role="tenant-admin", tenant_id="t-victim", audience=service,
            method=method, path=path, body=body,
        )  # fmt: skip
        return {IDENTITY_HEADER: token, "Content-Type": "application/json"}

    refused = [
        ("monitoring", "POST", "/alert-rules",
         {"name": "r", "metric": "temperature_c", "threshold": 1}),
        ("storage", "GET", "/storages", None),
        ("storage", "POST", "/storages/s/download-urls", {"keys": ["a"]}),
        ("metering", "GET", "/usage", None),
    ]  # fmt: skip
    async with httpx.AsyncClient() as http:
        for service, method, path, body in refused:
            content = json.dumps(body).encode() if body is not None else b""
            response = await http.request(
                method,
                stack_env[f"GPUCLOUD_{service.upper()}_URL"] + path,
                content=content,
                headers=as_tenant(service, method, path, content),
            )
            problem = assert_problem(response, 401, "unauthenticated")
            assert "signed by gateway" in problem["detail"], (path, problem)
        # The route it does call answers past authentication (no such storage here).
        path = "/storages/no-such-storage"
        allowed = await http.get(
            stack_env["GPUCLOUD_STORAGE_URL"] + path,
            headers=as_tenant("storage", "GET", path, b""),
        )
        assert_problem(allowed, 404)


async def test_the_simulators_fault_api_takes_the_operators_token(
    stack_env: dict[str, str],
) -> None:
    """A fault looks like a broken GPU to the whole platform: not for anyone to inject."""
    token = {"Authorization": f"Bearer {stack_env['GPUCLOUD_SIMULATOR_TOKEN']}"}
    fault = {"node": unique("no-such-node"), "gpu": 0, "fault": "overheat"}
    simulator_url = f"http://{layout.HOST}:{layout.PORTS.gpu_simulator}"
    async with httpx.AsyncClient(base_url=simulator_url) as simulator:
        # A non-ASCII guess is refused the same way, never a 500 (review L2).
        for headers in ({}, {"Authorization": "Bearer guessed"}, NON_ASCII_BEARER):
            assert_problem(await simulator.post("/faults", json=fault, headers=headers), 401)
            assert_problem(await simulator.delete("/faults/h100-zone-a-0", headers=headers), 401)
        # With the token: past authentication (an unknown node is a 404; clearing is a no-op).
        assert_problem(await simulator.post("/faults", json=fault, headers=token), 404)
        assert (
            await simulator.delete(f"/faults/{fault['node']}", headers=token)
        ).status_code == 204


#: A credential with non-ASCII characters, as a client may send one (UTF-8 bytes).
NON_ASCII_BEARER: Any = {"Authorization": "Bearer gpt_c2Vzc2lvbg.s\u00e9cr\u00e8t".encode()}


async def test_a_credential_with_non_ascii_characters_is_a_401_not_a_500(
    platform: Platform,
) -> None:
    """Every comparison of a presented secret takes any characters (review L2)."""
    headers: Any = NON_ASCII_BEARER
    for path in ("/v1/whoami", "/v1/gpu-instances"):
        assert_problem(await platform.http.get(path, headers=headers), 401)
    key_like: Any = {"Authorization": "Bearer gpc_k\u00e9y_\u00fcnicode-secret-value".encode()}
    assert_problem(await platform.http.get("/v1/whoami", headers=key_like), 401)


async def test_answers_carry_no_banner_and_secrets_are_never_cached(platform: Platform) -> None:
    account = await platform.tenant()
    _, _, key = await platform.member(account)
    minted = await platform.http.post(
        "/v1/api-keys", json={"name": unique("k")}, headers=bearer(key)
    )
    assert minted.status_code == 201, minted.text
    whoami = await platform.http.get("/v1/whoami", headers=bearer(key))
    console = await platform.http.get("/")
    for answer in (minted, whoami, console):
        assert "server" not in answer.headers, answer.headers
        assert answer.headers["x-frame-options"] == "DENY"
        # The local stack is plain http: HSTS there would pin a scheme it does not serve.
        assert "strict-transport-security" not in answer.headers
    assert minted.headers["cache-control"] == "no-store"
    assert whoami.headers["cache-control"] == "no-store"
    assert console.headers["cache-control"] == "no-cache"  # the console's own policy stands


async def test_a_gateway_served_over_tls_sends_hsts() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    transport = httpx.ASGITransport(app=SecurityHeaders(app, served_over_tls=True))
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        answer = await client.get("/v1/whoami")
    assert answer.headers["strict-transport-security"] == "max-age=63072000; includeSubDomains"
    assert answer.headers["cache-control"] == "no-store"


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/gpu-instances", {"image": "x", "specName": "s",
         "template": {"envs": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}},
         ["body", "template", "envs", 0, "name"]),
        ("/v1/jobs", {"image": "x", "specName": "s",
         "env": [{"name": "CUDA_VISIBLE_DEVICES", "value": "0,1,2,3"}]}, ["body", "env", 0, "name"]),
        ("/v1/inference-services", {"serviceID": "svc", "image": "x", "specName": "s", "port": 8000,
         "env": [{"name": "nvidia_driver_capabilities", "value": "all"}]}, ["body", "env", 0, "name"]),
    ],
)  # fmt: skip
async def test_a_tenant_cannot_choose_its_gpus_through_the_environment(
    platform: Platform, path: str, body: dict[str, Any], field: list[Any]
) -> None:
    """With the NVIDIA toolkit's defaults, NVIDIA_VISIBLE_DEVICES=all in a pod's env reaches
    every GPU of the node; no workload of a tenant may carry it, or its kin."""
    account = await platform.tenant()
    refused = await platform.http.post(path, json=body, headers=bearer(account.admin_key))
    problem = assert_problem(refused, 422, "validation_failed")
    [error] = [e for e in problem["errors"] if e["loc"] == field]
    assert "below the allocation" in error["msg"]


def _limit(name: str) -> Any:
    """A gateway setting as the local stack runs it (its default: `make env` sets none)."""
    assert f"GPUCLOUD_{name.upper()}" not in stack_service_env("gateway")
    return GatewaySettings.model_fields[name].default


def _from_address(stack_env: dict[str, str]) -> httpx.AsyncClient:
    """A client on an address of its own in 127.0.0.0/8, so its per-address buckets are
    its own and not the rest of the suite's (127.0.0.1)."""
    address = f"127.{secrets.randbelow(200) + 20}.{secrets.randbelow(250) + 1}.{secrets.randbelow(250) + 1}"
    transport = httpx.AsyncHTTPTransport(local_address=address)
    return httpx.AsyncClient(
        base_url=stack_env["GPUCLOUD_GATEWAY_URL"], transport=transport, timeout=30
    )


async def test_an_address_that_keeps_failing_authentication_is_refused_unread(
    platform: Platform, stack_env: dict[str, str]
) -> None:
    """Made-up keys each cost a database read before anyone is known: an address that
    draws its burst of 401s is answered 429 for everything, even a good key, until its
    bucket refills; other addresses go on (review M8)."""
    account = await platform.tenant()
    burst = _limit("failed_auths_per_address_burst")
    async with _from_address(stack_env) as flooder, _from_address(stack_env) as bystander:
        failed = 0
        while True:  # the bucket refills as it is spent: go on until the 429
            made_up = [f"gpc_{secrets.token_hex(8)}_{secrets.token_urlsafe(24)}" for _ in range(20)]
            answers = await asyncio.gather(
                *(flooder.get("/v1/gpu-instances", headers=bearer(key)) for key in made_up)
            )
            statuses = [answer.status_code for answer in answers]
            assert set(statuses) <= {401, 429}, statuses
            failed += statuses.count(401)
            if 429 in statuses:
                break
            assert failed < 3 * burst, "no address limit"
        assert failed >= burst  # the whole burst is served first
        refused = await flooder.get("/v1/gpu-instances", headers=bearer(account.admin_key))
        assert_problem(refused, 429, "rate_limited")
        assert int(refused.headers["retry-after"]) >= 1
        served = await bystander.get("/v1/gpu-instances", headers=bearer(account.admin_key))
        assert served.status_code == 200, served.text


async def test_password_sign_ins_are_limited_per_address_before_the_hash(
    platform: Platform, stack_env: dict[str, str]
) -> None:
    """Each sign-in costs a scrypt: one address gets a burst of them, whatever emails it
    tries, so random emails cannot buy it more; the user signs in from elsewhere."""
    account = await platform.tenant()
    email, password = f"{unique('u')}@{account.tenant_id}.test", "correct horse battery"
    created = await platform.http.post(
        "/v1/users",
        json={"email": email, "name": "Member", "role": "tenant-user", "password": password},
        headers=bearer(account.admin_key),
    )
    assert created.status_code == 201, created.text
    burst = _limit("sign_ins_per_address_burst")
    async with _from_address(stack_env) as guesser, _from_address(stack_env) as owner:
        guesses = 0
        while True:
            guess = {"email": f"{unique('nobody')}@x{guesses}.test", "password": "wrong password"}
            answer = await guesser.post("/v1/tokens", json=guess)
            if answer.status_code == 429:
                break
            assert answer.status_code == 401, answer.text
            guesses += 1
            assert guesses < 2 * burst, "no address limit"
        assert guesses >= burst
        right = {"email": email, "password": password}
        refused = await guesser.post("/v1/tokens", json=right)
        assert_problem(refused, 429, "rate_limited")
        assert "from this address" in refused.json()["detail"]
        assert (await owner.post("/v1/tokens", json=right)).status_code == 201


#: Registries the kubelet would reach on the node's own network (review M10).
NODE_NETWORK_IMAGES = [
    "10.0.0.5:5000/x:1", "169.254.169.254/latest", "[fd00::1]:5000/x", "localhost:5000/x",
    "registry:5000/x", "127.1/x", "registry.kube-system.svc/x", "mirror.cluster.local/x",
    "metadata.google.internal/x",
]  # fmt: skip


async def test_images_come_from_registries_named_by_public_names(platform: Platform) -> None:
    """Every kind of workload: an image whose registry is an address or a local name is a
    422 on `image`, before anything reaches Kubernetes; a public name is admitted."""
    account = await platform.tenant(max_gpus=8, max_instances=8)
    spec = await platform.spec()
    kinds: dict[str, dict[str, Any]] = {
        "/v1/gpu-instances": {"specName": spec},
        "/v1/jobs": {"specName": spec},
        "/v1/inference-services": {"specName": spec, "port": 8000},
    }
    for path, body in kinds.items():
        for image in NODE_NETWORK_IMAGES:
            refused = await platform.post_as_tenant(account, path, {**body, "image": image})
            problem = assert_problem(refused, 422, "validation_failed")
            [error] = [e for e in problem["errors"] if e["loc"] == ["body", "image"]]
            assert "public DNS name" in error["msg"], (path, image)
    started = await platform.start_instance(
        account, {"image": "nvcr.io/nvidia/pytorch:24.01-py3", "specName": spec}
    )
    assert started.status_code == 202, started.text
