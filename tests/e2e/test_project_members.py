"""Membership has one writer, the tenant document's revision (issue "Projects are a
boundary", item 8): members joined at the same moment through two gateway replicas
are all kept, none lost to the other's write."""

from __future__ import annotations

import asyncio

import httpx

from bench.failover import a_second_gateway

from .platform import Platform, bearer

JOINS = 12


async def test_members_joined_at_once_on_two_gateways_are_all_kept(platform: Platform) -> None:
    account = await platform.tenant()
    admin = bearer(account.admin_key)
    made = await platform.http.post(
        "/v1/projects", json={"projectID": "vision", "name": "Vision"}, headers=admin
    )
    assert made.status_code == 201, made.text
    users = []
    for index in range(JOINS):
        added = await platform.http.post(
            "/v1/users", headers=admin,
            json={"email": f"m{index}@{account.tenant_id}.test", "name": f"M{index}",
                  "role": "tenant-user"},
        )  # fmt: skip
        assert added.status_code == 201, added.text
        users.append(added.json()["userID"])
    async with (
        a_second_gateway() as second,
        httpx.AsyncClient(base_url=second, timeout=30) as other,
    ):
        gateways = [platform.http, other]

        async def join(index: int) -> int:
            http = gateways[index % 2]
            answer = await http.put(f"/v1/projects/vision/members/{users[index]}", headers=admin)
            return answer.status_code

        answers = await asyncio.gather(*(join(index) for index in range(JOINS)))
    assert answers == [200] * JOINS, answers
    project = (await platform.http.get("/v1/projects/vision", headers=admin)).json()
    assert sorted(m["userID"] for m in project["members"]) == sorted(users)
