"""Signed deliveries: each rule's webhook has a secret of its own, shown once.

A delivery carries `X-Gpucloud-Signature: t=<unix seconds>,v1=<hex>`, where the
hex is HMAC-SHA256 over `<t>.<body>` with the rule's secret, so a receiver
can tell a delivery from a forgery and refuse a replay (an old `t`). The secret
is stored encrypted (Fernet, with `GPUCLOUD_WEBHOOK_SECRETS_KEY`, which only the
monitoring service holds) and shown only when it is made.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import secrets

from cryptography.fernet import Fernet, InvalidToken

from gpucloud_libs.identity import WeakKey

SIGNATURE_HEADER = "X-Gpucloud-Signature"
SECRET_PREFIX = "whsec_"  # noqa: S105 - a format marker


def signature(secret: str, body: bytes, at: int) -> str:
    mac = hmac.new(secret.encode(), f"{at}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={at},v1={mac}"


class WebhookSecrets:
    def __init__(self, key: str, *, setting: str = "GPUCLOUD_WEBHOOK_SECRETS_KEY") -> None:
        self._text = key
        self._setting = setting

    @functools.cached_property
    def _fernet(self) -> Fernet:
        hint = "generate one with `openssl rand -base64 32 | tr '+/' '-_'`"
        if not self._text:
            raise WeakKey(f"{self._setting} is not set: {hint}")
        try:
            return Fernet(self._text)
        except ValueError as error:
            raise WeakKey(f"{self._setting} is not 32 bytes of base64url: {hint}") from error

    @staticmethod
    def generate_key() -> str:
        return Fernet.generate_key().decode()

    def check(self) -> None:
        """Raise WeakKey unless the key is usable (run before the service serves)."""
        _ = self._fernet

    def new(self) -> tuple[str, str]:
        """A fresh secret, and how it is stored."""
        secret = SECRET_PREFIX + secrets.token_urlsafe(32)
        return secret, self.seal(secret)

    def seal(self, secret: str) -> str:
        return self._fernet.encrypt(secret.encode()).decode()

    def open(self, sealed: str) -> str | None:
        """The secret, or None if it was sealed with another key."""
        try:
            return self._fernet.decrypt(sealed.encode()).decode()
        except InvalidToken:
            return None
