"""The formats of the gateway's credentials: API keys, passwords and session tokens.

- An API key reads `gpc_<key id>_<secret>`. The key id finds the record by `_id`
  (the one lookup every MongoDB-wire backend serves from an index); the secret
  is 256 random bits, stored as its SHA-256 and compared in constant time.
- Passwords are stored as scrypt hashes with a per-user salt.
- A session token reads `gpt_<payload>.<mac>`: HMAC-signed, short-lived, and
  bound to an audience (the API, or one instance host). Its key is derived
  from the session secret, which only the gateway holds; services verify
  forwarded identities with Ed25519 public keys, so neither can pass as the other.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import secrets
import time
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from gpucloud_libs.identity import Role, WeakKey, b64, require_strong_key, secrets_equal, unb64

from .schemas import Scope

KEY_PREFIX = "gpc_"
TOKEN_PREFIX = "gpt_"  # noqa: S105 - a format marker
BOOTSTRAP_KEY_ID = "bootstrap"
API_AUDIENCE = "api"

_SCRYPT_N, _SCRYPT_R, _SCRYPT_P = 2**14, 8, 1


def new_api_key() -> tuple[str, str]:
    """A fresh (key id, whole key)."""
    key_id = secrets.token_hex(6)
    return key_id, f"{KEY_PREFIX}{key_id}_{secrets.token_urlsafe(32)}"


def parse_api_key(presented: str) -> str | None:
    """The key id of a well-formed API key, else None."""
    if not presented.startswith(KEY_PREFIX):
        return None
    key_id, sep, secret = presented.removeprefix(KEY_PREFIX).partition("_")
    if not sep or not key_id or len(key_id) > 32 or len(secret) < 16:
        return None
    return key_id


BOOTSTRAP_SETTING = "GPUCLOUD_BOOTSTRAP_ADMIN_KEY"


def check_bootstrap_key(presented: str) -> None:
    """The platform's master key is as strong as the keys it would otherwise guard (L6):
    `gpc_bootstrap_` and a secret of 32+ random characters. Raises WeakKey."""
    if parse_api_key(presented) != BOOTSTRAP_KEY_ID:
        raise WeakKey(f"{BOOTSTRAP_SETTING} must read gpc_bootstrap_<32+ random characters>")
    secret = presented.removeprefix(f"{KEY_PREFIX}{BOOTSTRAP_KEY_ID}_")
    require_strong_key(secret, setting=f"{BOOTSTRAP_SETTING}'s secret")


def hash_secret(secret: str) -> str:
    """How a random secret of the platform's (an API key, an invitation's link, a
    sign-in's state) is kept: 256 random bits make a fast hash as safe as a slow one."""
    return hashlib.sha256(secret.encode()).hexdigest()


def hash_api_key(presented: str) -> str:
    return hash_secret(presented)


def api_key_matches(presented: str, stored_hash: str) -> bool:
    return secrets_equal(hash_api_key(presented), stored_hash)


def hash_password(password: str) -> str:
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=_SCRYPT_N, r=_SCRYPT_R, p=_SCRYPT_P)
    return f"scrypt${_SCRYPT_N}${_SCRYPT_R}${_SCRYPT_P}${salt.hex()}${digest.hex()}"


def password_matches(password: str, stored: str) -> bool:
    try:
        _, n, r, p, salt, digest = stored.split("$")
        computed = hashlib.scrypt(
            password.encode(), salt=bytes.fromhex(salt), n=int(n), r=int(r), p=int(p)
        )
    except ValueError:
        return False
    return secrets_equal(computed.hex(), digest)


@functools.cache
def _stand_in_hash() -> str:
    """What an unknown email's password is checked against, so that a miss costs the
    same scrypt as a hit and its timing says nothing about which emails exist."""
    return hash_password(secrets.token_urlsafe(24))


def sign_in_matches(password: str, stored: str | None) -> bool:
    """One scrypt, whether or not the user (or their password) exists. Slow on
    purpose: callers run it off the event loop."""
    matched = password_matches(password, stored or _stand_in_hash())
    return matched and stored is not None


class SessionToken(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    #: Minted by signing in (`user`) or by exchanging an API key (`key`); the
    #: source is checked on every use, so revoking it ends its tokens too.
    source: Literal["user", "key"]
    source_id: str
    #: For a user: the password generation it was minted under; a changed password
    #: ends the tokens of the old one (review L1). Tokens from before it hold 0.
    source_version: int = 0
    role: Role
    tenant_id: str | None
    scopes: list[Scope]
    audience: str
    expires_at: float
    #: Minted by a single sign-on: keys it mints live a day at most (review N7).
    sso: bool = False


def _token_key(session_secret: str) -> bytes:
    return hmac.new(session_secret.encode(), b"gpucloud session token v1", hashlib.sha256).digest()


def _mac(key: bytes, payload: str) -> str:
    return b64(hmac.new(key, payload.encode(), hashlib.sha256).digest())


def seal(key: bytes, payload: bytes) -> str:
    """`<payload>.<HMAC-SHA256>`, both base64url: tamper-evident, not secret."""
    encoded = b64(payload)
    return f"{encoded}.{_mac(key, encoded)}"


def unseal(key: bytes, token: str) -> bytes | None:
    """The payload of a token `seal` made with `key`; None if the signature fails."""
    encoded, _, signature = token.partition(".")
    if not secrets_equal(signature, _mac(key, encoded)):
        return None
    try:
        return unb64(encoded)
    except ValueError:
        return None


def issue_token(session_secret: str, token: SessionToken) -> str:
    return TOKEN_PREFIX + seal(_token_key(session_secret), token.model_dump_json().encode())


def read_token(session_secret: str, presented: str, *, audience: str) -> SessionToken | None:
    """The token's claims if it is genuine, unexpired and meant for `audience`."""
    if not presented.startswith(TOKEN_PREFIX):
        return None
    payload = unseal(_token_key(session_secret), presented.removeprefix(TOKEN_PREFIX))
    if payload is None:
        return None
    try:
        token = SessionToken.model_validate_json(payload)
    except ValidationError:
        return None
    if token.expires_at < time.time() or not secrets_equal(token.audience, audience):
        return None
    return token
