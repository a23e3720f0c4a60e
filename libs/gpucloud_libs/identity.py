"""Signed caller identity, minted by the gateway and verified by every service.

The gateway authenticates the caller (API key or token), then forwards the
request with `X-Gpucloud-Identity: <token>`: the caller (subject, role, tenant),
the one request it is good for (the service it is for, method, path, query and a
SHA-256 of the body), a nonce and a short expiry, signed with Ed25519. A service
takes each nonce once, so a token seen on the wire cannot be sent again, with
this body or another, within its minute (review M6). Only a signer holds its private key; services hold the public keys,
so a service's environment, or a copy of its settings, cannot mint an identity.
Services trust only what this token says, never the network or the request
body, for who is calling and for which tenant.

A signer other than the gateway (the instances service, asking storage for an
attachment) may act for a tenant, never as a platform admin.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import json
import secrets
import sys
import time
from collections import OrderedDict
from collections.abc import Generator, Mapping
from typing import Literal

import httpx
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import Forbidden, Unauthenticated
from .naming import DEFAULT_PROJECT

IDENTITY_HEADER = "X-Gpucloud-Identity"
DEFAULT_TTL_S = 60
#: The one signer whose identities may say platform-admin.
GATEWAY = "gateway"

Role = Literal["platform-admin", "tenant-admin", "tenant-user"]


#: A secret shorter than this (or a well-known placeholder) stops a service at start.
MIN_KEY_LENGTH = 32
PLACEHOLDER_KEYS = frozenset({"change-me", "changeme", "secret", "password", "test", "dev"})


class WeakKey(RuntimeError):
    """A configured key that anyone could guess, or none at all: the service refuses to start."""


def secrets_equal(presented: str, expected: str) -> bool:
    """A constant-time comparison of two texts, any characters: `hmac.compare_digest`
    refuses a non-ASCII str with TypeError, which a caller must never turn into a 500."""
    return hmac.compare_digest(presented.encode(), expected.encode())


def require_strong_key(key: str, *, setting: str) -> None:
    """Refuse an unset, short, placeholder or single-character secret, naming the setting."""
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
    #: Who signed it: the gateway for callers from outside, a service for its own calls.
    issuer: str = GATEWAY
    #: The one project a key of a project acts in (decision 139); None: any of its
    #: user's.
    project: str | None = None
    #: The projects whose work the caller sees and acts on (decision 142): a tenant
    #: user's own, a key of one project's alone; None: every project of the tenant (a
    #: tenant admin's credential of no project, a platform admin, a service).
    projects: tuple[str, ...] | None = None

    @property
    def is_platform_admin(self) -> bool:
        return self.role == "platform-admin"

    def sees_project(self, project: str) -> bool:
        """Whether the caller sees, and may act on, the work of `project` (decision 142):
        the one rule every service applies to every listing and every id."""
        return self.projects is None or project in self.projects

    def require_role(self, *allowed: Role) -> None:
        if self.role not in allowed:
            raise Forbidden(f"this action needs one of the roles: {', '.join(allowed)}")

    def require_tenant(self) -> str:
        """The caller's tenant; platform admins act on a tenant only through admin routes."""
        if self.tenant_id is None:
            raise Forbidden("this action is for tenant members; platform admins use the admin API")
        return self.tenant_id


class IdentityClaims(BaseModel):
    """What an identity token says, signed: who, for which request, until when."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    issuer: str = Field(alias="iss")
    subject: str = Field(alias="sub")
    role: Role
    tenant_id: str | None = Field(alias="tenant")
    #: The service it is for: a token for storage is no good at metering.
    audience: str = Field(alias="aud")
    method: str
    path: str
    query: str = Field(alias="qs")
    body_sha256: str = Field(alias="body")
    nonce: str = Field(alias="jti")
    expires_at: float = Field(alias="exp")
    project: str | None = None
    projects: tuple[str, ...] | None = None


def fail_closed_projects(
    role: Role, project: str | None, projects: tuple[str, ...] | None
) -> tuple[str, ...] | None:
    """The projects a token's caller sees: as signed; a token that names none (a signer
    from before decision 142) sees every project only where no membership applies, an
    admin's credential of no project, and otherwise its key's project or `default`."""
    if projects is not None or (role != "tenant-user" and project is None):
        return projects
    return (project or DEFAULT_PROJECT,)


def body_digest(body: bytes) -> str:
    return b64(hashlib.sha256(body).digest())


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64(text: str) -> bytes:
    """Raises ValueError (binascii.Error) on text that is not base64url."""
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


_KEYGEN_HINT = "generate a pair with `python -m gpucloud_libs.identity keygen`"


def _raw_key(text: str, *, setting: str) -> bytes:
    try:
        raw = unb64(text.strip())
    except (ValueError, binascii.Error):
        raw = b""
    if len(raw) != 32:
        raise WeakKey(f"{setting} is not a base64url Ed25519 key of 32 bytes: {_KEYGEN_HINT}")
    return raw


def generate_key_pair() -> tuple[str, str]:
    """A fresh (private key, public key), each the base64url of its 32 raw bytes."""
    seed = secrets.token_bytes(32)
    public = Ed25519PrivateKey.from_private_bytes(seed).public_key()
    return b64(seed), b64(public.public_bytes(Encoding.Raw, PublicFormat.Raw))


class IdentitySigner:
    """Mints identity tokens as `issuer`, with the issuer's own private key."""

    def __init__(self, issuer: str, private_key: str, *, setting: str) -> None:
        # Parsed on first use or by `check`, which the runtime calls before serving,
        # so that a bad key stops the service with a message, not an import error.
        self.issuer = issuer
        self._text = private_key
        self._setting = setting

    @functools.cached_property
    def _key(self) -> Ed25519PrivateKey:
        if not self._text:
            raise WeakKey(f"{self._setting} is not set: {_KEYGEN_HINT}")
        return Ed25519PrivateKey.from_private_bytes(_raw_key(self._text, setting=self._setting))

    def check(self) -> None:
        """Raise WeakKey unless the private key is usable."""
        _ = self._key

    def sign(
        self,
        *,
        subject: str,
        role: Role,
        tenant_id: str | None,
        audience: str,
        method: str,
        path: str,
        query: str = "",
        body: bytes = b"",
        ttl_s: float = DEFAULT_TTL_S,
        project: str | None = None,
        projects: tuple[str, ...] | None = None,
    ) -> str:
        """A token good once, for `ttl_s`, for this one request to the `audience` service:
        `path` and `query` as sent (still encoded, the query without its `?`), and
        exactly these body bytes."""
        claims = IdentityClaims(
            iss=self.issuer, sub=subject, role=role, tenant=tenant_id, aud=audience,
            method=method.upper(), path=path, qs=query, body=body_digest(body),
            jti=b64(secrets.token_bytes(16)), exp=time.time() + ttl_s, project=project,
            projects=projects,
        )  # fmt: skip
        # A token says nothing of what it has not (project keys, decision 139; project
        # views, decision 142), so a service from before them still reads it.
        unset = {name for name in ("project", "projects") if getattr(claims, name) is None}
        payload = b64(claims.model_dump_json(by_alias=True, exclude=unset).encode())
        return f"{payload}.{b64(self._key.sign(payload.encode()))}"


class IdentityVerifier:
    """Checks identity tokens against the public keys of the trusted signers."""

    def __init__(self, public_keys: Mapping[str, str], *, setting: str, audience: str) -> None:
        self._texts = dict(public_keys)
        self._setting = setting
        self._audience = audience
        #: Nonces taken, with their tokens' expiry, oldest first: kept until they expire.
        self._seen: OrderedDict[str, float] = OrderedDict()

    @functools.cached_property
    def _keys(self) -> dict[str, Ed25519PublicKey]:
        if GATEWAY not in self._texts:
            raise WeakKey(f"{self._setting} has no key for {GATEWAY!r}: {_KEYGEN_HINT}")
        return {
            issuer: Ed25519PublicKey.from_public_bytes(_raw_key(key, setting=self._setting))
            for issuer, key in self._texts.items()
        }

    def check(self) -> None:
        """Raise WeakKey unless every public key is usable."""
        _ = self._keys

    def verify(
        self,
        token: str | None,
        *,
        method: str,
        path: str,
        query: str = "",
        body: bytes = b"",
        now: float | None = None,
    ) -> Identity:
        """The caller, if `token` is genuine, unexpired, unused, and minted for this very
        request to this service."""
        if not token:
            raise Unauthenticated(
                f"missing {IDENTITY_HEADER}; call this service through the gateway"
            )
        claims = self._claims(token)
        now = time.time() if now is None else now
        if claims.expires_at < now:
            raise Unauthenticated("the identity token has expired")
        if claims.audience != self._audience:
            raise Unauthenticated(
                f"the identity token is for the {claims.audience} service, not this one"
            )
        if (claims.method, claims.path, claims.query) != (method.upper(), path, query):
            raise Unauthenticated("the identity token was minted for another request")
        if not hmac.compare_digest(claims.body_sha256, body_digest(body)):
            raise Unauthenticated("the identity token was minted for another request body")
        self._take_nonce(claims.nonce, claims.expires_at, now)
        if claims.role == "platform-admin" and claims.issuer != GATEWAY:
            raise Unauthenticated(f"only the {GATEWAY} may sign for a platform admin")
        if claims.role != "platform-admin" and claims.tenant_id is None:
            raise Unauthenticated("a tenant role without a tenant")
        return Identity(
            subject=claims.subject,
            role=claims.role,
            tenant_id=claims.tenant_id,
            expires_at=claims.expires_at,
            issuer=claims.issuer,
            project=claims.project,
            projects=fail_closed_projects(claims.role, claims.project, claims.projects),
        )

    def _take_nonce(self, nonce: str, expires_at: float, now: float) -> None:
        while self._seen and next(iter(self._seen.values())) < now:
            self._seen.popitem(last=False)
        if nonce in self._seen:
            raise Unauthenticated("the identity token was already used")
        self._seen[nonce] = expires_at

    def _claims(self, token: str) -> IdentityClaims:
        payload, _, signature = token.partition(".")
        try:
            raw = unb64(payload)
            issuer = json.loads(raw).get("iss")
            key = self._keys.get(issuer) if isinstance(issuer, str) else None
            if key is None:
                raise Unauthenticated("the identity token's signer is not trusted")
            key.verify(unb64(signature), payload.encode())
            return IdentityClaims.model_validate_json(raw)
        except InvalidSignature as error:
            raise Unauthenticated("the identity token's signature is invalid") from error
        except (ValidationError, ValueError, AttributeError, binascii.Error) as error:
            raise Unauthenticated("the identity token is malformed") from error


class SignedAs(httpx.Auth):
    """An httpx client's requests to the `audience` service, each signed for itself as
    `signer` signs them: how a caller with a signer's key (a benchmark, a test) calls a
    service directly."""

    requires_request_body = True  # the body's digest is signed

    def __init__(
        self,
        signer: IdentitySigner,
        *,
        audience: str,
        role: Role,
        tenant_id: str | None,
        subject: str = "tester",
        project: str | None = None,
        projects: tuple[str, ...] | None = None,
    ) -> None:
        self.signer, self.audience = signer, audience
        self.role, self.tenant_id, self.subject = role, tenant_id, subject
        self.project, self.projects = project, projects

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        path, _, query = request.url.raw_path.decode("latin-1").partition("?")
        request.headers[IDENTITY_HEADER] = self.signer.sign(
            subject=self.subject, role=self.role, tenant_id=self.tenant_id,
            audience=self.audience, method=request.method, path=path, query=query,
            body=request.content, project=self.project, projects=self.projects,
        )  # fmt: skip
        yield request


def main() -> None:
    """`keygen`: print a fresh key pair as settings (the private one is for the signer alone)."""
    if sys.argv[1:] != ["keygen"]:
        print("usage: python -m gpucloud_libs.identity keygen", file=sys.stderr)
        sys.exit(2)
    private, public = generate_key_pair()
    print(f"GPUCLOUD_IDENTITY_PRIVATE_KEY={private}")
    print(f"public key: {public}  (in GPUCLOUD_IDENTITY_PUBLIC_KEYS of every service)")


if __name__ == "__main__":
    main()
