"""Secrets a service must read back later (a webhook's signing secret, a storage's
presigning key), sealed at rest with a key only that service holds.

Fernet: AES-128-CBC with an HMAC-SHA256, from `cryptography`. A sealed value
opened with another key is refused, not misread.
"""

from __future__ import annotations

import functools

from cryptography.fernet import Fernet, InvalidToken

from .identity import WeakKey

_HINT = "generate one with `openssl rand -base64 32 | tr '+/' '-_'`"


class SecretBox:
    def __init__(self, key: str, *, setting: str) -> None:
        # Parsed on first use or by `check`, which the runtime calls before serving.
        self._text = key
        self._setting = setting

    @staticmethod
    def generate_key() -> str:
        return Fernet.generate_key().decode()

    @functools.cached_property
    def _fernet(self) -> Fernet:
        if not self._text:
            raise WeakKey(f"{self._setting} is not set: {_HINT}")
        try:
            return Fernet(self._text)
        except ValueError as error:
            raise WeakKey(f"{self._setting} is not 32 bytes of base64url: {_HINT}") from error

    def check(self) -> None:
        """Raise WeakKey unless the key is usable."""
        _ = self._fernet

    def seal(self, secret: str) -> str:
        return self._fernet.encrypt(secret.encode()).decode()

    def open(self, sealed: str) -> str | None:
        """The secret, or None if it was sealed with another key."""
        try:
            return self._fernet.decrypt(sealed.encode()).decode()
        except InvalidToken:
            return None
