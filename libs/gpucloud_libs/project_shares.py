"""What the `default` project holds of a tenant's GPUs (decision 138): the gateway
shows it and the instances service admits by it, so both read it here."""

from __future__ import annotations

from collections.abc import Iterable


def default_share(tenant_max_gpus: int, shares: Iterable[int | None]) -> int:
    """The GPUs the other projects' shares leave of the tenant's (a project with no
    share carves nothing)."""
    return max(tenant_max_gpus - sum(share or 0 for share in shares), 0)
