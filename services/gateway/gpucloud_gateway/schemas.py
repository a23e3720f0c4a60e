"""Request and response models of the gateway's public API."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

Role = Literal["platform-admin", "tenant-admin", "tenant-user"]


class Principal(BaseModel):
    """The authenticated caller, as every route and downstream service sees it."""

    key_id: str
    role: Role
    tenant_id: str | None
