"""A start retried (the same workload id, or the same Idempotency-Key) finds what the
first request created, and a different request under the same name is refused:
instances and jobs take the same steps (a service is found again by its id alone)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel

from gpucloud_libs.errors import Conflict
from gpucloud_libs.identity import Identity
from gpucloud_libs.naming import DEFAULT_PROJECT

from ..store import instance_key

DocT_co = TypeVar("DocT_co", bound=Mapping[str, Any], covariant=True)


class Replayable(Protocol[DocT_co]):
    """A kind's store, as far as finding an earlier request's workload goes."""

    async def get(self, key: str) -> DocT_co | None: ...

    async def by_idempotency_key(self, tenant_id: str, idempotency_key: str) -> DocT_co | None: ...

    async def record_idempotency_key(
        self, tenant_id: str, idempotency_key: str, key: str
    ) -> bool: ...


def request_hash(body: BaseModel, *, id_field: str) -> str:
    """What a replay must match: the request without the workload's own id (a retry
    that names the id the first one was given is the same request)."""
    fields = body.model_dump(mode="json", exclude={id_field})
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


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


async def claim_idempotency_key(
    store: Replayable[DocT_co], tenant_id: str, idempotency_key: str | None, key: str
) -> DocT_co | None:
    """Record that `idempotency_key` makes the workload `key`: None once it is recorded
    (or there is no key); the workload of a concurrent request that recorded it first,
    to replay; a 409 while that request has not made its workload yet."""
    if idempotency_key is None or await store.record_idempotency_key(
        tenant_id, idempotency_key, key
    ):
        return None
    again = await store.by_idempotency_key(tenant_id, idempotency_key)
    if again is None:
        raise Conflict("a request with this Idempotency-Key is in progress; retry")
    return again


def same_request(
    existing: Mapping[str, Any], hashed: str, what: str, *, caller: Identity,
    verb: str = "created", **ids: str,
) -> None:  # fmt: skip
    """A replay must be the request that made `existing` (`what`: "job 'train-1'",
    `verb`: how it came to be), by a caller who sees it: else a 409 naming it, with its
    id (`ids`) for clients to switch on. Another project's workload is never answered
    with, whatever the body (decision 142): its id is taken, and that is all."""
    if not caller.sees_project(existing.get("project", DEFAULT_PROJECT)):
        raise Conflict(f"{what} is taken; choose another id")
    if existing.get("request_hash") != hashed:
        raise Conflict(f"{what} was already {verb} with a different request", **ids)
