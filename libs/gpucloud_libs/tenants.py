"""What every service checks of a tenant it learnt from the gateway's tenant events."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from .errors import Forbidden, TenantNotReady

TenantT = TypeVar("TenantT", bound=Mapping[str, Any])


def require_active(tenant: TenantT | None, *, service: str) -> TenantT:
    """The tenant, unless this service has not heard of it yet (retry soon) or it is
    suspended (reads only)."""
    if tenant is None:
        raise TenantNotReady(
            f"the tenant is not provisioned in the {service} service yet; retry shortly",
            retry_after_s=2,
        )
    if tenant.get("status") != "active":
        raise Forbidden("the tenant is suspended")
    return tenant
