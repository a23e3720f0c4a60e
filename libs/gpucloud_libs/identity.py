"""Signed caller identity, minted by the gateway and verified by every service.

The gateway authenticates the caller (API key or token), then forwards the
request with `X-Gpucloud-Identity: <token>`: a compact HMAC-SHA256 token over
the principal and a short expiry. Services trust only what this token says,
never the network or the request body, for who is calling and for which
tenant.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from .errors import Forbidden, Unauthenticated

IDENTITY_HEADER = "X-Gpucloud-Identity"
DEFAULT_TTL_S = 60

Role = Literal["platform-admin", "tenant-admin", "tenant-user"]


#: A signing key shorter than this (or a well-known placeholder) stops a service at start.
MIN_KEY_LENGTH = 32
PLACEHOLDER_KEYS = frozenset({"change-me", "changeme", "secret", "password", "test", "dev"})


class WeakKey(RuntimeError):
    """A configured key that anyone could guess: the service refuses to start with it."""


def require_strong_key(key: str, *, setting: str) -> None:
    """Refuse an unset, short, placeholder or single-character key, naming the setting."""
    fix = f"set {setting} to 32+ random characters, e.g. `openssl rand -base64 48`"
    if not key:
        raise WeakKey(f"{setting} is not set: {fix}")
    if key.lower() in PLACEHOLDER_KEYS or len(set(key)) < 8:
        raise WeakKey(f"{setting} is a placeholder, not a key: {fix}")
    if len(key) < MIN_KEY_LENGTH:
        raise WeakKey(f"{setting} is {len(key)} characters, too short to be safe: {fix}")


class Identity(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    subject: str  # user id or API key id
    role: Role
    tenant_id: str | None  # None only for platform admins
    expires_at: float

    @property
    def is_platform_admin(self) -> bool:
        return self.role == "platform-admin"

    def require_role(self, *allowed: Role) -> None:
        if self.role not in allowed:
            raise Forbidden(f"this action needs one of the roles: {', '.join(allowed)}")

    def require_tenant(self) -> str:
        """The caller's tenant; platform admins act on a tenant only through admin routes."""
        if self.tenant_id is None:
            raise Forbidden("this action is for tenant members; platform admins use the admin API")
        return self.tenant_id


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(key: str, payload: str) -> str:
    return _b64(hmac.new(key.encode(), payload.encode(), hashlib.sha256).digest())


def seal(key: str, payload: bytes) -> str:
    """`<payload>.<HMAC-SHA256>`, both base64url: tamper-evident, not secret."""
    if not key:
        raise ValueError("a signing key is required")
    encoded = _b64(payload)
    return f"{encoded}.{_mac(key, encoded)}"


def unseal(key: str, token: str) -> bytes | None:
    """The payload of a token `seal` made with `key`; None if the signature fails."""
    encoded, _, signature = token.partition(".")
    if not key or not hmac.compare_digest(signature, _mac(key, encoded)):
        return None
    try:
        return _unb64(encoded)
    except ValueError:
        return None


def sign_identity(
    key: str, *, subject: str, role: Role, tenant_id: str | None, ttl_s: float = DEFAULT_TTL_S
) -> str:
    identity = Identity(
        subject=subject, role=role, tenant_id=tenant_id, expires_at=time.time() + ttl_s
    )
    return seal(key, identity.model_dump_json().encode())


def verify_identity(key: str, token: str | None, *, now: float | None = None) -> Identity:
    if not token:
        raise Unauthenticated(f"missing {IDENTITY_HEADER}; call this service through the gateway")
    payload = unseal(key, token)
    if payload is None:
        raise Unauthenticated("the identity token's signature is invalid")
    try:
        identity = Identity.model_validate_json(payload)
    except (ValidationError, ValueError, json.JSONDecodeError) as error:
        raise Unauthenticated("the identity token is malformed") from error
    if identity.expires_at < (time.time() if now is None else now):
        raise Unauthenticated("the identity token has expired")
    if identity.role != "platform-admin" and identity.tenant_id is None:
        raise Unauthenticated("a tenant role without a tenant")
    return identity
