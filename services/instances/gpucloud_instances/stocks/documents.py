"""The stored documents of warm stock units."""

from __future__ import annotations

from datetime import datetime
from typing import TypedDict


class StockUnitDoc(TypedDict):
    _id: str  # the placeholder pod's name
    cluster: str  # where it is kept (read back as the home cluster's when not recorded)
    spec_name: str
    state: str  # placing | available
    node: str | None
    zone: str | None
    created_at: datetime
