"""The web console's session over the real gateway: an HttpOnly cookie behind a server-side
session, CSRF on every change, sign-out that ends it at once, and nothing a browser could
do with it beyond what its user or key may."""

from __future__ import annotations

import hashlib
from typing import Any

import httpx
from pymongo import AsyncMongoClient

from .platform import Platform, assert_problem, bearer
from .support import unique

SESSION = "/v1/console/session"
COOKIE = "gpucloud_console"  # the local stack serves plain http: no __Host- prefix


def _cookie_of(response: httpx.Response) -> str:
    header = response.headers["set-cookie"]
    name, _, rest = header.partition("=")
    assert name == COOKIE, header
    attributes = {part.strip().split("=")[0].lower() for part in rest.split(";")[1:]}
    assert {"httponly", "samesite", "path", "max-age"} <= attributes, header
    assert "samesite=strict" in header.lower(), header
    return rest.split(";")[0]


async def _password_user(platform: Platform) -> tuple[str, str, str]:
    """A tenant and one of its users with a password: (tenant id, email, password)."""
    account = await platform.tenant()
    email, password = f"{unique('u')}@{account.tenant_id}.test", "console pass phrase"
    made = await platform.http.post(
        "/v1/users",
        json={"email": email, "name": "Console", "role": "tenant-user", "password": password},
        headers=bearer(account.admin_key),
    )
    assert made.status_code == 201, made.text
    return account.tenant_id, email, password


async def test_a_password_sign_in_opens_a_cookie_session_that_sign_out_ends(
    platform: Platform, mongo: AsyncMongoClient[dict[str, Any]]
) -> None:
    tenant_id, email, password = await _password_user(platform)
    wrong = await platform.http.post(SESSION, json={"email": email, "password": "not it"})
    assert_problem(wrong, 401)
    assert "set-cookie" not in wrong.headers

    signed_in = await platform.http.post(SESSION, json={"email": email, "password": password})
    assert signed_in.status_code == 201, signed_in.text
    cookie = _cookie_of(signed_in)
    session = signed_in.json()
    assert session["principal"]["tenantID"] == tenant_id
    assert session["principal"]["via"] == "console"
    assert cookie not in signed_in.text  # the id travels in the cookie alone

    # The database keeps only the id's hash.
    stored = await mongo["gpucloud_gateway"]["console_sessions"].find_one(
        {"_id": hashlib.sha256(cookie.encode()).hexdigest()}
    )
    assert stored is not None
    assert cookie not in str(stored)

    jar = {COOKIE: cookie}
    async with httpx.AsyncClient(base_url=str(platform.http.base_url), cookies=jar) as browser:
        again = await browser.get(SESSION)
        assert again.json()["csrfToken"] == session["csrfToken"]
        me = await browser.get("/v1/whoami")
        assert me.json()["tenantID"] == tenant_id
        listed = await browser.get("/v1/gpu-instances")
        assert listed.status_code == 200, listed.text

        # A change without the CSRF token, with a wrong one, or from another site: refused.
        body = {"name": "from the console"}
        assert_problem(await browser.post("/v1/api-keys", json=body), 403)
        wrong_token = {"x-csrf-token": "0" * 64}
        assert_problem(await browser.post("/v1/api-keys", json=body, headers=wrong_token), 403)
        cross_site = {"x-csrf-token": session["csrfToken"], "sec-fetch-site": "cross-site"}
        assert_problem(await browser.post("/v1/api-keys", json=body, headers=cross_site), 403)
        other_origin = {"x-csrf-token": session["csrfToken"], "origin": "https://evil.example"}
        assert_problem(await browser.post("/v1/api-keys", json=body, headers=other_origin), 403)
        made = await browser.post(
            "/v1/api-keys", json=body, headers={"x-csrf-token": session["csrfToken"]}
        )
        assert made.status_code == 201, made.text

        # Sign-out needs the token too, then the same cookie is dead everywhere.
        assert_problem(await browser.delete(SESSION), 403)
        out = await browser.delete(SESSION, headers={"x-csrf-token": session["csrfToken"]})
        assert out.status_code == 204, out.text
        assert (
            'gpucloud_console=""' in out.headers["set-cookie"]
            or "Max-Age=0" in (out.headers["set-cookie"])
        )
    async with httpx.AsyncClient(base_url=str(platform.http.base_url), cookies=jar) as replay:
        assert_problem(await replay.get("/v1/whoami"), 401)
        assert_problem(await replay.get(SESSION), 401)
    assert await mongo["gpucloud_gateway"]["console_sessions"].find_one(stored) is None


async def test_an_api_key_session_ends_with_its_key(platform: Platform) -> None:
    account = await platform.tenant()
    user_id, key_id, secret = await platform.member(account)
    signed_in = await platform.http.post(SESSION, json={"apiKey": secret})
    assert signed_in.status_code == 201, signed_in.text
    assert signed_in.json()["principal"]["keyID"] == key_id
    assert signed_in.json()["principal"]["userID"] == user_id
    jar = {COOKIE: _cookie_of(signed_in)}
    async with httpx.AsyncClient(base_url=str(platform.http.base_url), cookies=jar) as browser:
        assert (await browser.get("/v1/whoami")).json()["keyID"] == key_id
        revoked = await platform.http.delete(
            f"/v1/api-keys/{key_id}", headers=bearer(account.admin_key)
        )
        assert revoked.status_code in {200, 204}, revoked.text
        assert_problem(await browser.get("/v1/whoami"), 401)


async def test_sign_in_refuses_tokens_machine_keys_and_bad_bodies(platform: Platform) -> None:
    account = await platform.tenant()
    token = await platform.http.post("/v1/tokens", json={}, headers=bearer(account.admin_key))
    refused = await platform.http.post(SESSION, json={"apiKey": token.json()["token"]})
    assert_problem(refused, 401)
    machine = await platform.http.post(
        "/v1/api-keys",
        json={"name": "replicas", "serviceIDs": ["chat"]},
        headers=bearer(account.admin_key),
    )
    assert machine.status_code == 201, machine.text
    assert_problem(
        await platform.http.post(SESSION, json={"apiKey": machine.json()["secret"]}), 403
    )
    assert_problem(await platform.http.post(SESSION, json={"apiKey": "gpc_nope_nope"}), 401)
    for body in ({}, {"email": "a@b.test"}, {"apiKey": "x", "email": "a@b.test", "password": "p"}):
        assert_problem(await platform.http.post(SESSION, json=body), 422)
    assert_problem(await platform.http.get(SESSION), 401)
    # Signing out without a session is already done.
    assert (await platform.http.delete(SESSION)).status_code == 204


async def test_the_console_is_served_with_its_security_headers(platform: Platform) -> None:
    for path in ("/", "/instances", "/storages/models"):
        page = await platform.http.get(path)
        assert page.status_code == 200, (path, page.text)
        assert '<div id="app">' in page.text
        policy = page.headers["content-security-policy"]
        assert "script-src 'self'" in policy
        assert "frame-ancestors 'none'" in policy
        assert page.headers["cache-control"] == "no-cache"
    script = page.text.split('src="')[1].split('"')[0]
    bundle = await platform.http.get(script)
    assert bundle.status_code == 200
    assert "immutable" in bundle.headers["cache-control"]
    assert bundle.headers["content-encoding"] == "gzip"  # httpx asks for it, and unpacks it
    assert bundle.text.startswith(("(function", "var ", "const ", "let ", "function", "import"))
    assert_problem(await platform.http.get("/assets/nope.js"), 404)
    assert_problem(await platform.http.get("/v1/no-such-route"), 404)
    escape = await platform.http.get("/assets/..%2F..%2F..%2Fetc%2Fpasswd")
    assert "root:" not in escape.text
