"""A start retried (the same workload id, or the same Idempotency-Key) finds what the
first request created: every kind takes the same steps to find it."""

from __future__ import annotations

from typing import Protocol, TypeVar

from ..store import instance_key

DocT_co = TypeVar("DocT_co", covariant=True)


class Replayable(Protocol[DocT_co]):
    """A kind's store, as far as finding an earlier request's workload goes."""

    async def get(self, key: str) -> DocT_co | None: ...

    async def by_idempotency_key(self, tenant_id: str, idempotency_key: str) -> DocT_co | None: ...


async def earlier(
    store: Replayable[DocT_co],
    tenant_id: str,
    workload_id: str | None,
    idempotency_key: str | None,
) -> DocT_co | None:
    """The workload an earlier request with this id or Idempotency-Key created, if any."""
    if workload_id is not None:
        found = await store.get(instance_key(tenant_id, workload_id))
        if found is not None:
            return found
    if idempotency_key is not None:
        return await store.by_idempotency_key(tenant_id, idempotency_key)
    return None
