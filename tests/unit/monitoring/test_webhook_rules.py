"""A webhook's secret opens only with its key, and the guard refuses private
addresses, including those that embed a private IPv4 address in IPv6 (NAT64, 6to4)."""

from __future__ import annotations

import pytest

from gpucloud_libs.errors import ValidationFailed
from gpucloud_libs.outbound_guard import OutboundGuard
from gpucloud_monitoring.webhook_secrets import WebhookSecrets


def test_a_sealed_secret_opens_only_with_its_key() -> None:
    mine, other = (
        WebhookSecrets(WebhookSecrets.generate_key()),
        WebhookSecrets(WebhookSecrets.generate_key()),
    )
    secret, sealed = mine.new()
    assert secret not in sealed
    assert mine.open(sealed) == secret
    assert other.open(sealed) is None


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9000/",
        "http://10.0.0.5/",
        "http://169.254.169.254/latest",
        "http://100.64.0.7/",
        "http://[fd00::1]/",
        "ftp://x/",
    ],
)
async def test_webhooks_may_not_point_into_private_networks(url: str) -> None:
    with pytest.raises(ValidationFailed):
        await OutboundGuard(field="webhookURL", allow_private_networks=False).check(url)
    if url.startswith("http"):
        await OutboundGuard(field="webhookURL", allow_private_networks=True).check(url)


@pytest.mark.parametrize(
    "address", ["64:ff9b::a9fe:a9fe", "2002:a9fe:a9fe::1", "64:ff9b:1::1", "::a9fe:a9fe"]
)
async def test_nat64_and_6to4_addresses_are_not_global(address: str) -> None:
    """NAT64 and 6to4 prefixes embed an IPv4 address (here 169.254.169.254, the cloud
    metadata service); Python calls some of them global."""
    guard = OutboundGuard(field="webhookURL", allow_private_networks=False)
    with pytest.raises(ValidationFailed, match="not a globally routable address"):
        await guard.check(f"http://[{address}]/hook")
