"""The audit log: every authenticated mutating call, who, what, which resource, when, result.

An entry is written before the caller sees the response, so an acknowledged
change always has its entry. It is then published on the audit topic; entries
not yet published are retried by the sweep, with the entry id as the event id
so a retry is recognisable downstream.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime

from faststream.kafka import KafkaBroker
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpucloud_libs.clock import now
from gpucloud_libs.errors import BadRequest
from gpucloud_libs.events import AuditRecorded
from gpucloud_libs.kafka import publish_event
from gpucloud_libs.outbox import PublishRetries
from gpucloud_libs.topics import AUDIT

from .documents import AuditDoc
from .schemas import AuditEntry, AuditPage, Principal
from .store import ApiKeyStore, AuditStore, UserStore

log = logging.getLogger(__name__)

MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})


@dataclass(frozen=True)
class AuditedCall:
    principal: Principal
    #: The tenant the call acted on: the caller's, or the one a platform admin named.
    tenant_id: str | None
    action: str
    resource: str


class AuditLog:
    def __init__(
        self,
        store: AuditStore,
        broker: KafkaBroker,
        *,
        source: str,
        spawn: Callable[[Awaitable[None]], None],
        users: UserStore,
        keys: ApiKeyStore,
    ) -> None:
        self._users, self._keys = users, keys
        self.store = store
        self.broker = broker
        self.source = source
        self._spawn = spawn
        self._retries = PublishRetries()

    async def record(self, call: AuditedCall, result: int) -> None:
        # Ids sort by time, so the newest-first listing is an _id order.
        audit_id = f"{time.time_ns():020d}-{secrets.token_hex(4)}"
        doc: AuditDoc = {
            "_id": audit_id,
            "tenant_id": call.tenant_id,
            "actor": call.principal.subject,
            "role": call.principal.role,
            "action": call.action,
            "resource": call.resource,
            "result": result,
            "at": now(),
            "published": False,
        }
        await self.store.insert(doc)
        self._spawn(self._publish(doc))

    async def _publish(self, doc: AuditDoc) -> None:
        event = AuditRecorded(
            audit_id=doc["_id"], tenant_id=doc["tenant_id"], actor=doc["actor"],
            action=doc["action"], resource=doc["resource"], result=doc["result"], at=doc["at"],
        )  # fmt: skip
        try:
            await publish_event(self.broker, AUDIT, event, source=self.source, event_id=doc["_id"])
        except Exception:
            self._retries.failed(doc["_id"])
            raise
        await self.store.mark_published(doc["_id"])

    async def republish(self) -> None:
        await self._retries.sweep(
            all_unpublished=self.store.unpublished, get=self.store.get, publish=self._publish
        )

    async def page(
        self,
        principal: Principal,
        *,
        tenant_id: str | None,
        since: datetime | None,
        cursor: str | None,
        limit: int,
    ) -> AuditPage:
        """A tenant admin reads their tenant's log; a platform admin any tenant's, or all."""
        scope = principal.tenant_id if principal.tenant_id is not None else tenant_id
        all_tenants = principal.tenant_id is None and tenant_id is None
        before = _decode_cursor(cursor) if cursor else None
        docs = await self.store.page(
            tenant_id=scope, all_tenants=all_tenants, before=before, since=since, limit=limit + 1
        )
        docs_shown = docs[:limit]
        names = await self._actor_names(
            sorted({doc["actor"] for doc in docs_shown}), principal.tenant_id
        )
        items = [_entry(doc, names.get(doc["actor"])) for doc in docs_shown]
        next_cursor = _encode_cursor(docs[limit - 1]["_id"]) if len(docs) > limit else None
        return AuditPage(items=items, next_cursor=next_cursor)

    async def _actor_names(self, actors: list[str], tenant_id: str | None) -> dict[str, str]:
        """Who the actors are, as people read them: a user's name, or the name of a key
        that has no user (the bootstrap admin's). The ids stay in the log; names are
        read now, so a renamed user shows their name of today. A tenant's reader is told
        the names of its own people only (an operator acting in it stays an id); a
        platform admin (`tenant_id` None) is told every name."""
        if not actors:
            return {}
        users, keys = await asyncio.gather(
            self._users.names(actors, tenant_id), self._keys.names(actors, tenant_id)
        )
        return {**keys, **users}


def _entry(doc: AuditDoc, actor_name: str | None) -> AuditEntry:
    return AuditEntry(
        audit_id=doc["_id"], tenant_id=doc["tenant_id"], actor=doc["actor"],
        actor_name=actor_name, role=doc["role"], action=doc["action"],
        resource=doc["resource"], result=doc["result"], at=doc["at"],
    )  # fmt: skip


def _encode_cursor(audit_id: str) -> str:
    return base64.urlsafe_b64encode(audit_id.encode()).decode().rstrip("=")


def _decode_cursor(cursor: str) -> str:
    try:
        decoded = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (ValueError, UnicodeDecodeError) as error:
        raise BadRequest("the cursor is not one this API returned") from error
    if not decoded[:20].isdigit():
        raise BadRequest("the cursor is not one this API returned")
    return decoded


class AuditMiddleware:
    """Records the audited call a route put in `request.state.audit`, before the caller
    sees the response. Throttled calls (429) are not recorded: a flood must not turn
    into a flood of writes."""

    def __init__(self, app: ASGIApp, audit: AuditLog) -> None:
        self.app = app
        self.audit = audit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in MUTATING:
            await self.app(scope, receive, send)
            return

        async def send_after_recording(message: Message) -> None:
            if message["type"] == "http.response.start":
                call = scope.get("state", {}).get("audit")
                if isinstance(call, AuditedCall) and message["status"] != 429:
                    await self.audit.record(call, message["status"])
            await send(message)

        await self.app(scope, receive, send_after_recording)
