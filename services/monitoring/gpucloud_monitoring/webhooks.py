"""Webhooks of alert rules: the address guard, and deliveries with retries and backoff.

Deliveries are stored first (keyed by alert transition, so a replay finds the
same one), then sent; the store is scanned once after a start and afterwards
only this process's own deliveries are looked up, by id.
"""

from __future__ import annotations

import asyncio
import ipaddress
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlparse

import aiohttp

from gpucloud_libs.clock import aware, now
from gpucloud_libs.errors import ValidationFailed
from gpucloud_libs.mongo import Document

from .documents import DeliveryDoc
from .store import MonitoringStore

#: Webhook retries: after 1, 2, 4 ... seconds, at most this many attempts.
WEBHOOK_ATTEMPTS = 8
WEBHOOK_TIMEOUT_S = 5.0


class WebhookGuard:
    """A tenant's rule must not make the control plane call its own internals."""

    def __init__(self, *, allow_private_networks: bool) -> None:
        self._allow_private_networks = allow_private_networks

    async def check(self, url: str) -> None:
        parsed = urlparse(url)
        if parsed.scheme not in {"http", "https"} or not parsed.hostname:
            raise ValidationFailed("webhookURL must be an http(s) URL")
        if self._allow_private_networks:
            return
        try:
            # Resolved off the event loop: a slow resolver must not stall ingestion.
            found = await asyncio.get_running_loop().getaddrinfo(parsed.hostname, None)
            addresses = {str(info[4][0]) for info in found}
        except OSError as error:
            raise ValidationFailed(f"webhookURL host does not resolve: {error}") from error
        for address in addresses:
            # Only globally routable addresses: not private, loopback, link-local
            # (cloud metadata), shared (CGNAT), multicast or reserved.
            if not ipaddress.ip_address(address).is_global:
                raise ValidationFailed("webhookURL must not point into a private network")


class Webhooks:
    def __init__(self, store: MonitoringStore, guard: WebhookGuard) -> None:
        self._store = store
        self._guard = guard
        self._targets: dict[str, str] = {}  # rule id -> URL
        #: Pending deliveries of this process, by id: when each is due next.
        #: None until the first round after a start has read the pending ones.
        self._due: dict[str, datetime] | None = None
        self._http: aiohttp.ClientSession | None = None

    def set_targets(self, targets: dict[str, str]) -> None:
        """The webhook URL of each rule that has one (from the rule catalogue)."""
        self._targets = targets

    async def enqueue(self, rule_id: str, delivery_id: str, payload: dict[str, Any]) -> None:
        """Record a delivery of `payload` to the rule's webhook, if it has one."""
        url = self._targets.get(rule_id)
        if not url:
            return
        await self._store.insert_delivery(
            {
                "_id": delivery_id,
                "rule_id": rule_id,
                "url": url,
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
            await self._guard.check(delivery["url"])
            async with self._session().post(
                delivery["url"],
                json=delivery["payload"],
                headers={"X-Gpucloud-Delivery": delivery_id},
            ) as response:
                if response.ok:
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

    def _session(self) -> aiohttp.ClientSession:
        # Made on first use, inside the running loop (aiohttp binds a session to it).
        if self._http is None:
            self._http = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=WEBHOOK_TIMEOUT_S)
            )
        return self._http

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
