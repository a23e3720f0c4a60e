"""Signed deliveries: each rule's webhook has a secret of its own, shown once.

A delivery carries `X-Gpucloud-Signature: t=<unix seconds>,v1=<hex>`, where the
hex is HMAC-SHA256 over `<t>.<body>` with the rule's secret, so a receiver
can tell a delivery from a forgery and refuse a replay (an old `t`). The secret
is stored sealed (libs sealing, with `GPUCLOUD_WEBHOOK_SECRETS_KEY`, which only
the monitoring service holds) and shown only when it is made.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from gpucloud_libs.sealing import SecretBox

SIGNATURE_HEADER = "X-Gpucloud-Signature"
SECRET_PREFIX = "whsec_"  # noqa: S105 - a format marker


def signature(secret: str, body: bytes, at: int) -> str:
    mac = hmac.new(secret.encode(), f"{at}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={at},v1={mac}"


class WebhookSecrets(SecretBox):
    def __init__(self, key: str, *, setting: str = "GPUCLOUD_WEBHOOK_SECRETS_KEY") -> None:
        super().__init__(key, setting=setting)

    def new(self) -> tuple[str, str]:
        """A fresh secret, and how it is stored."""
        secret = SECRET_PREFIX + secrets.token_urlsafe(32)
        return secret, self.seal(secret)
