"""Webhook deliveries of alert rules, signed, with retries and backoff.

Deliveries are stored first (keyed by alert transition, so a replay finds the
same one), then sent; the store is scanned once after a start and afterwards
only this process's own deliveries are looked up, by id. Where a webhook may
point is gpucloud_libs.outbound_guard's; how deliveries are signed, webhook_secrets.py's.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta
from typing import Any

import aiohttp

from gpucloud_libs.clock import aware, now
from gpucloud_libs.errors import ValidationFailed
from gpucloud_libs.mongo import Document
from gpucloud_libs.outbound_guard import OutboundGuard

from .documents import DeliveryDoc
from .store import MonitoringStore
from .webhook_secrets import SIGNATURE_HEADER, WebhookSecrets, signature

#: Webhook retries: after 1, 2, 4 ... seconds, at most this many attempts.
WEBHOOK_ATTEMPTS = 8
WEBHOOK_TIMEOUT_S = 5.0


#: A rule's webhook: its URL and its sealed secret (None for a rule from before signing).
Target = tuple[str, str | None]


class Webhooks:
    def __init__(
        self, store: MonitoringStore, guard: OutboundGuard, secrets: WebhookSecrets
    ) -> None:
        self._store = store
        self._guard = guard
        self._secrets = secrets
        self._targets: dict[str, Target] = {}  # rule id -> its webhook
        #: Pending deliveries of this process, by id: when each is due next.
        #: None until the first round after a start has read the pending ones.
        self._due: dict[str, datetime] | None = None
        self._http: aiohttp.ClientSession | None = None

    def set_targets(self, targets: dict[str, Target]) -> None:
        """The webhook of each rule that has one (from the rule catalogue)."""
        self._targets = targets

    async def enqueue(self, rule_id: str, delivery_id: str, payload: dict[str, Any]) -> None:
        """Record a delivery of `payload` to the rule's webhook, if it has one."""
        target = self._targets.get(rule_id)
        if target is None:
            return
        url, sealed_secret = target
        await self._store.insert_delivery(
            {
                "_id": delivery_id,
                "rule_id": rule_id,
                "url": url,
                "secret": sealed_secret,
                "payload": payload,
                "state": "pending",
                "attempts": 0,
                "next_at": now(),
                "last_error": None,
            }
        )
        if self._due is not None:
            self._due[delivery_id] = now()

    async def deliver(self) -> None:
        """Send pending deliveries that are due; back off exponentially on failure."""
        at = now()
        if self._due is None:
            pending = await self._store.pending_deliveries()
            self._due = {d["_id"]: aware(d["next_at"]) for d in pending}
        due = sorted(key for key, next_at in self._due.items() if next_at <= at)
        for delivery_id in due:
            delivery = await self._store.delivery(delivery_id)
            if delivery is None or delivery["state"] != "pending":
                self._due.pop(delivery_id, None)
                continue
            await self._attempt(delivery)

    async def _attempt(self, delivery: DeliveryDoc) -> None:
        assert self._due is not None
        delivery_id, attempts = delivery["_id"], delivery["attempts"] + 1
        error = None
        try:
            # Names are checked by the session's resolver, on the connection itself.
            self._guard.check_shape(delivery["url"])
            body = json.dumps(delivery["payload"], separators=(",", ":")).encode()
            async with self._session().post(
                delivery["url"],
                data=body,
                headers=self._headers(delivery, body),
                allow_redirects=False,
            ) as response:
                if 200 <= response.status < 300:  # a 3xx is not followed, nor a delivery
                    await self._store.update_delivery(
                        delivery_id,
                        {"state": "delivered", "attempts": attempts, "delivered_at": now()},
                    )
                    self._due.pop(delivery_id, None)
                    return
                error = f"HTTP {response.status}"
        except (aiohttp.ClientError, TimeoutError, ValidationFailed) as failure:
            error = f"{type(failure).__name__}: {failure}"[:300]
        fields: Document = {"attempts": attempts, "last_error": error}
        if attempts >= WEBHOOK_ATTEMPTS:
            fields["state"] = "failed"
            self._due.pop(delivery_id, None)
        else:
            fields["next_at"] = now() + timedelta(seconds=2 ** (attempts - 1))
            self._due[delivery_id] = fields["next_at"]
        await self._store.update_delivery(delivery_id, fields)

    def _headers(self, delivery: DeliveryDoc, body: bytes) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "X-Gpucloud-Delivery": delivery["_id"]}
        sealed = delivery.get("secret")
        secret = self._secrets.open(sealed) if sealed else None
        if secret is not None:
            headers[SIGNATURE_HEADER] = signature(secret, body, int(time.time()))
        return headers

    def _session(self) -> aiohttp.ClientSession:
        # Made on first use, inside the running loop (aiohttp binds a session to it).
        if self._http is None:
            self._http = self._guard.session(WEBHOOK_TIMEOUT_S)
        return self._http

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
