"""What every service checks of a tenant it learnt from the gateway's events
(gpucloud_libs.tenants.require_active): not heard of yet is a retry, suspended is
a refusal, active is served."""

from __future__ import annotations

from typing import Any

import pytest

from gpucloud_libs.errors import Forbidden, TenantNotReady
from gpucloud_libs.tenants import require_active


def test_an_active_tenant_is_handed_back_as_it_is() -> None:
    tenant = {"_id": "acme", "status": "active", "max_gpus": 8}
    assert require_active(tenant, service="instances") is tenant


def test_a_tenant_not_heard_of_yet_is_a_retry_soon_naming_the_service() -> None:
    with pytest.raises(TenantNotReady, match="storage service yet") as raised:
        require_active(None, service="storage")
    assert raised.value.status == 409
    assert raised.value.extensions == {"retry_after_s": 2}
    assert raised.value.problem()["code"] == "tenant_not_ready"


@pytest.mark.parametrize(
    "tenant", [{"status": "suspended"}, {"status": "Active"}, {"status": None}, {}]
)
def test_any_tenant_not_active_is_refused(tenant: dict[str, Any]) -> None:
    with pytest.raises(Forbidden, match="suspended"):
        require_active(tenant, service="instances")
