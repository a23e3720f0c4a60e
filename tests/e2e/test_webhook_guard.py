"""Webhooks connect only where the guard looked: a name that answers with a public
address when the rule is saved and a private one at delivery (DNS rebinding)
reaches nothing."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from pymongo import AsyncMongoClient

from gpucloud_libs.errors import ValidationFailed
from gpucloud_libs.outbound_guard import OutboundGuard
from gpucloud_monitoring.store import MonitoringStore
from gpucloud_monitoring.webhook_secrets import SIGNATURE_HEADER, WebhookSecrets
from gpucloud_monitoring.webhooks import Webhooks

from .dns_server import dns_server
from .support import loopback_server, unique

NAME = "hook.rebind.test"
PUBLIC = "93.184.216.34"  # answered at save time; never dialled by this test


class Hits:
    def __init__(self) -> None:
        self.requests: list[tuple[str, bytes]] = []

    async def handle(self, request: web.Request) -> web.Response:
        self.requests.append((request.headers.get(SIGNATURE_HEADER, ""), await request.read()))
        return web.Response(status=204)


@pytest.fixture
async def receiver() -> AsyncIterator[tuple[Hits, int]]:
    """The platform's own insides, as far as the test goes: a server on loopback."""
    hits = Hits()
    app = web.Application()
    app.router.add_post("/hook", hits.handle)
    async with loopback_server(app) as port:
        yield hits, port


@pytest.fixture
async def store(mongo: AsyncMongoClient[dict[str, object]]) -> AsyncIterator[MonitoringStore]:
    name = unique("gpucloud_webhook_test").replace("-", "_")
    yield MonitoringStore(mongo[name])
    await mongo.drop_database(name)


async def test_a_name_that_rebinds_to_a_private_address_is_refused_at_delivery(
    receiver: tuple[Hits, int], store: MonitoringStore
) -> None:
    hits, port = receiver
    url = f"http://{NAME}:{port}/hook"
    secrets = WebhookSecrets(WebhookSecrets.generate_key())
    secret, sealed = secrets.new()
    records = {NAME: PUBLIC}
    async with dns_server(records) as nameserver:
        guard = OutboundGuard(
            field="webhookURL", allow_private_networks=False, nameservers=[nameserver]
        )
        await guard.check(url)  # public when the rule is saved: accepted
        records[NAME] = "127.0.0.1"  # ...and private by the time the alert fires

        webhooks = Webhooks(store, guard, secrets)
        webhooks.set_targets({"rule-1": (url, sealed)})
        await webhooks.enqueue("rule-1", "delivery-1", {"state": "firing"})
        await webhooks.deliver()
        await webhooks.close()
        refused = await store.delivery("delivery-1")
        assert refused is not None
        assert (refused["state"], refused["attempts"]) == ("pending", 1)
        assert "127.0.0.1, not a globally routable address" in (refused["last_error"] or "")
        assert hits.requests == []
        with pytest.raises(ValidationFailed, match="private network"):
            await guard.check(url)  # saving it now is refused too

        # Where private addresses are allowed (a lab), the same path delivers, signed.
        lab = Webhooks(
            store,
            OutboundGuard(
                field="webhookURL", allow_private_networks=True, nameservers=[nameserver]
            ),
            secrets,
        )
        lab.set_targets({"rule-1": (url, sealed)})
        await lab.enqueue("rule-1", "delivery-2", {"state": "resolved"})
        await lab.deliver()
        await lab.close()
    delivered = await store.delivery("delivery-2")
    assert delivered is not None
    assert delivered["state"] == "delivered"
    [(header, body)] = hits.requests
    fields = dict(part.split("=", 1) for part in header.split(","))
    expected = hmac.new(secret.encode(), f"{fields['t']}.".encode() + body, hashlib.sha256)
    assert fields["v1"] == expected.hexdigest()


async def test_a_literal_private_address_is_refused_without_resolving(
    store: MonitoringStore,
) -> None:
    secrets = WebhookSecrets(WebhookSecrets.generate_key())
    webhooks = Webhooks(
        store, OutboundGuard(field="webhookURL", allow_private_networks=False), secrets
    )
    webhooks.set_targets({"rule-1": ("http://169.254.169.254/latest/meta-data", None)})
    await webhooks.enqueue("rule-1", "delivery-1", {"state": "firing"})
    await webhooks.deliver()
    await webhooks.close()
    refused = await store.delivery("delivery-1")
    assert refused is not None
    assert "private network" in (refused["last_error"] or "")


async def test_a_delivery_never_follows_a_redirect(store: MonitoringStore) -> None:
    """A receiver that answers 307 towards the platform's insides gets a failed attempt,
    not a second request to wherever it pointed."""
    hits: list[str] = []

    async def redirect(request: web.Request) -> web.Response:
        hits.append(request.path)
        raise web.HTTPTemporaryRedirect("/internal")

    async def internal(request: web.Request) -> web.Response:
        hits.append(request.path)
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/hook", redirect)
    app.router.add_post("/internal", internal)
    async with loopback_server(app) as port:
        secrets = WebhookSecrets(WebhookSecrets.generate_key())
        webhooks = Webhooks(
            store, OutboundGuard(field="webhookURL", allow_private_networks=True), secrets
        )
        webhooks.set_targets({"rule-1": (f"http://127.0.0.1:{port}/hook", None)})
        await webhooks.enqueue("rule-1", "delivery-1", {"state": "firing"})
        await webhooks.deliver()
        await webhooks.close()
    attempt = await store.delivery("delivery-1")
    assert attempt is not None
    assert (attempt["state"], attempt["last_error"]) == ("pending", "HTTP 307")
    assert hits == ["/hook"]
