"""No tenant or instance can be given an id that would make its hosts ambiguous. The
hosts' own rules, pure, are tests/unit/libs/test_naming.py."""

from __future__ import annotations

from .platform import Platform, assert_problem
from .support import unique


async def test_an_ambiguous_tenant_or_instance_id_cannot_be_made(platform: Platform) -> None:
    tenant = {
        "tenantID": f"{unique('t')}--x",
        "name": "Ambiguous",
        "limits": {"maxGpus": 1, "maxInstances": 1, "maxStorageBytes": 0},
        "admin": {"email": "admin@ambiguous.test", "name": "Admin", "role": "tenant-admin"},
    }
    refused = await platform.http.post("/v1/tenants", json=tenant, headers=platform.admin)
    assert_problem(refused, 422, "validation_failed")
    account = await platform.tenant()
    spec = await platform.spec()
    started = await platform.start_instance(
        account, {"image": "busybox", "specName": spec, "instanceID": "nb--8888"}
    )
    assert_problem(started, 422, "validation_failed")
