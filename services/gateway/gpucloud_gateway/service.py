"""Gateway domain logic: who is calling, what they may do, tenants, users and keys.

Authentication reads by `_id` only and caches what it read for a couple of
seconds, so a call through the gateway usually costs no database round trip.
A revocation on this replica takes effect at once; another replica notices
within `auth_cache_ttl_s`.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Awaitable
from datetime import UTC, datetime, timedelta
from typing import Literal

from faststream.kafka import KafkaBroker

from gpucloud_libs.clock import aware, now
from gpucloud_libs.errors import (
    Conflict,
    Forbidden,
    NotFound,
    Unauthenticated,
    ValidationFailed,
)
from gpucloud_libs.events import TenantDeleted, TenantQuota, TenantUpserted
from gpucloud_libs.identity import Role
from gpucloud_libs.kafka import publish_event
from gpucloud_libs.mongo import Document
from gpucloud_libs.topics import TENANTS

from . import credentials
from .cache import TtlCache
from .credentials import API_AUDIENCE, BOOTSTRAP_KEY_ID, SessionToken
from .ratelimit import RateLimiter
from .schemas import (
    ALL_SCOPES,
    ApiKey,
    ApiKeyCreate,
    ApiKeyCreated,
    Principal,
    QuotaLimits,
    RateLimit,
    Scope,
    SelfQuota,
    Tenant,
    TenantCreate,
    TenantCreated,
    TenantUpdate,
    TokenIssued,
    TokenRequest,
    User,
    UserCreate,
    UserUpdate,
)
from .settings import GatewaySettings
from .store import AlreadyExists, ApiKeyStore, TenantStore, UserStore

log = logging.getLogger(__name__)

_ROLE_RANK: dict[Role, int] = {"tenant-user": 1, "tenant-admin": 2, "platform-admin": 3}
DEFAULT_KEY_LIFETIME = timedelta(days=90)
MAX_KEY_LIFETIME = timedelta(days=366)
#: last_used_at is written at most this often per key: it is for humans, not billing.
TOUCH_INTERVAL_S = 60.0


class TenantSuspended(Forbidden):
    code = "tenant_suspended"
    title = "The tenant is suspended"


class InsufficientScope(Forbidden):
    code = "insufficient_scope"
    title = "The credential's scopes do not allow this"


def effective_quota(limits: Document, self_quota: Document) -> Document:
    """The tighter of the platform's limit and the tenant admin's own, field by field."""
    tighter: Document = {}
    for field, limit in limits.items():
        own = self_quota.get(field)
        tighter[field] = limit if own is None else own if limit is None else min(own, limit)
    return tighter


class GatewayService:
    def __init__(
        self,
        settings: GatewaySettings,
        tenants: TenantStore,
        users: UserStore,
        keys: ApiKeyStore,
        broker: KafkaBroker,
        *,
        source: str,
    ) -> None:
        self.settings = settings
        self.tenants = tenants
        self.users = users
        self.keys = keys
        self.broker = broker
        self.source = source
        self.limiter = RateLimiter()
        self._signing_key = settings.identity_signing_key.get_secret_value()
        self._key_cache = TtlCache[str, Document | None](settings.auth_cache_ttl_s)
        self._user_cache = TtlCache[str, Document | None](settings.auth_cache_ttl_s)
        self._tenant_cache = TtlCache[str, Document | None](settings.auth_cache_ttl_s)
        self._touched: dict[str, float] = {}
        self._background: set[asyncio.Task[None]] = set()
        self._tenant_locks: dict[str, asyncio.Lock] = {}

    # --- authentication ------------------------------------------------------------

    async def install_bootstrap_admin(self, presented: str) -> None:
        if credentials.parse_api_key(presented) != BOOTSTRAP_KEY_ID:
            raise ValueError(
                "GPUCLOUD_BOOTSTRAP_ADMIN_KEY must read gpc_bootstrap_<secret> (32+ random characters)"
            )
        await self.keys.upsert_bootstrap(BOOTSTRAP_KEY_ID, credentials.hash_api_key(presented))
        self._key_cache.forget(BOOTSTRAP_KEY_ID)

    async def authenticate(
        self, presented: str | None, *, audience: str = API_AUDIENCE
    ) -> Principal:
        """Who is calling, from an API key or a session token meant for `audience`."""
        if not presented:
            raise Unauthenticated(
                "send an API key or a token as `Authorization: Bearer <credential>`"
            )
        if presented.startswith(credentials.KEY_PREFIX):
            return await self._from_api_key(presented)  # good for the API and instance URLs
        token = credentials.read_token(self._signing_key, presented, audience=audience)
        if token is None:
            raise Unauthenticated("the credential is not a valid, unexpired API key or token")
        return await self._from_token(
            token, via="token" if audience == API_AUDIENCE else "session_cookie"
        )

    async def _from_api_key(self, presented: str) -> Principal:
        key_id = credentials.parse_api_key(presented)
        doc = await self._key_cache.get(key_id, self.keys.get) if key_id else None
        if doc is None or not credentials.api_key_matches(presented, doc["secret_hash"]):
            raise Unauthenticated("the API key is unknown")
        if doc.get("revoked_at") is not None:
            raise Unauthenticated("the API key has been revoked")
        expires_at = doc.get("expires_at")
        if expires_at is not None and aware(expires_at) <= now():
            raise Unauthenticated("the API key has expired")
        await self._check_tenant(doc.get("tenant_id"))
        self._touch(doc["_id"])
        return Principal(
            subject=doc.get("user_id") or doc["_id"],
            user_id=doc.get("user_id"),
            key_id=doc["_id"],
            role=doc["role"],
            tenant_id=doc.get("tenant_id"),
            scopes=doc.get("scopes") or list(ALL_SCOPES),
            via="api_key",
        )

    async def _from_token(
        self, token: SessionToken, *, via: Literal["token", "session_cookie"]
    ) -> Principal:
        if token.source == "key":
            doc = await self._key_cache.get(token.source_id, self.keys.get)
            if doc is None or doc.get("revoked_at") is not None:
                raise Unauthenticated("the API key this token came from has been revoked")
            user_id, key_id = doc.get("user_id"), token.source_id
        else:
            user = await self._user_cache.get(token.source_id, self.users.get)
            if user is None or user["status"] != "active":
                raise Unauthenticated("the user this token belongs to is disabled or deleted")
            user_id, key_id = token.source_id, None
        await self._check_tenant(token.tenant_id)
        return Principal(
            subject=user_id or token.source_id,
            user_id=user_id,
            key_id=key_id,
            role=token.role,
            tenant_id=token.tenant_id,
            scopes=token.scopes,
            via=via,
        )

    async def _check_tenant(self, tenant_id: str | None) -> None:
        if tenant_id is None:
            return
        tenant = await self._tenant_cache.get(tenant_id, self.tenants.get)
        if tenant is None or tenant["status"] == "deleted":
            raise Unauthenticated("the tenant of this credential no longer exists")

    def _touch(self, key_id: str) -> None:
        last = self._touched.get(key_id, 0.0)
        if time.monotonic() - last < TOUCH_INTERVAL_S:
            return
        self._touched[key_id] = time.monotonic()
        self.spawn(self.keys.touch(key_id, now()))

    def spawn(self, work: Awaitable[None]) -> None:
        """Fire-and-forget work that must not delay the response; failures are logged."""

        async def run() -> None:
            try:
                await work
            except Exception:
                log.exception("background work failed")

        task = asyncio.get_running_loop().create_task(run())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # --- authorisation and rate limits ---------------------------------------------

    async def authorize(
        self, principal: Principal, *, roles: frozenset[Role], scope: Scope, method: str
    ) -> None:
        if principal.role not in roles:
            raise Forbidden(f"this action needs one of the roles: {', '.join(sorted(roles))}")
        if scope not in principal.scopes:
            raise InsufficientScope(f"this credential lacks the scope {scope!r}", scope=scope)
        if principal.tenant_id is not None and method not in {"GET", "HEAD", "OPTIONS"}:
            tenant = await self._tenant_cache.get(principal.tenant_id, self.tenants.get)
            if tenant is not None and tenant["status"] == "suspended":
                raise TenantSuspended("the tenant is suspended: reads only")
        await self.rate_limit(principal)

    async def rate_limit(self, principal: Principal) -> None:
        if principal.key_id is not None:
            self.limiter.take(
                f"key:{principal.key_id}",
                rate=self.settings.key_rate_limit_per_s,
                burst=self.settings.key_rate_limit_burst,
                what="this API key",
            )
        if principal.tenant_id is not None:
            limit = await self._tenant_rate_limit(principal.tenant_id)
            self.limiter.take(
                f"tenant:{principal.tenant_id}",
                rate=limit.requests_per_s,
                burst=limit.burst,
                what="this tenant",
            )

    async def _tenant_rate_limit(self, tenant_id: str) -> RateLimit:
        tenant = await self._tenant_cache.get(tenant_id, self.tenants.get)
        if tenant is not None and tenant.get("rate_limit"):
            return RateLimit.model_validate(tenant["rate_limit"])
        return self._default_rate_limit

    @property
    def _default_rate_limit(self) -> RateLimit:
        return RateLimit(
            requests_per_s=self.settings.tenant_rate_limit_per_s,
            burst=self.settings.tenant_rate_limit_burst,
        )

    # --- tokens --------------------------------------------------------------------

    async def issue_token(self, request: TokenRequest, principal: Principal | None) -> TokenIssued:
        if request.email is not None and request.password is not None:
            self.limiter.take(
                f"login:{request.email}", rate=0.2, burst=10, what="signing in as this user"
            )
            user = await self.users.by_email(request.email)
            stored = user.get("password_hash") if user else None
            if (
                user is None
                or stored is None
                or not credentials.password_matches(request.password.get_secret_value(), stored)
            ):
                raise Unauthenticated("the email or password is wrong")
            if user["status"] != "active":
                raise Unauthenticated("the user is disabled")
            await self._check_tenant(user["tenant_id"])
            claims = SessionToken(
                source="user", source_id=user["_id"], role=user["role"],
                tenant_id=user["tenant_id"], scopes=list(ALL_SCOPES),
                audience=API_AUDIENCE, expires_at=time.time() + request.ttl_s,
            )  # fmt: skip
        elif principal is not None and principal.via == "api_key" and principal.key_id:
            claims = self.session_claims(principal, audience=API_AUDIENCE, ttl_s=request.ttl_s)
        else:
            raise Unauthenticated(
                "send an email and password, or exchange an API key sent as a bearer"
            )
        return TokenIssued(
            token=credentials.issue_token(self._signing_key, claims),
            expires_at=datetime.fromtimestamp(claims.expires_at, UTC),
        )

    def session_claims(self, principal: Principal, *, audience: str, ttl_s: float) -> SessionToken:
        """A token acting as `principal`, tied to the credential it was minted from."""
        source, source_id = (
            ("key", principal.key_id) if principal.key_id else ("user", principal.user_id)
        )
        if source_id is None:
            raise Unauthenticated("this credential cannot mint tokens")
        return SessionToken(
            source=source, source_id=source_id, role=principal.role, tenant_id=principal.tenant_id,
            scopes=principal.scopes, audience=audience, expires_at=time.time() + ttl_s,
        )  # fmt: skip

    def sign_session(self, claims: SessionToken) -> str:
        return credentials.issue_token(self._signing_key, claims)

    # --- tenants -------------------------------------------------------------------

    def tenant_view(self, doc: Document) -> Tenant:
        return Tenant(
            tenant_id=doc["_id"],
            name=doc["name"],
            status=doc["status"],
            limits=QuotaLimits.model_validate(doc["limits"]),
            self_quota=SelfQuota.model_validate(doc.get("self_quota") or {}),
            quota=QuotaLimits.model_validate(
                effective_quota(doc["limits"], doc.get("self_quota") or {})
            ),
            rate_limit=RateLimit.model_validate(doc["rate_limit"])
            if doc.get("rate_limit")
            else self._default_rate_limit,
            created_at=doc["created_at"],
            updated_at=doc["updated_at"],
        )

    async def create_tenant(self, body: TenantCreate) -> TenantCreated:
        at = now()
        doc: Document = {
            "_id": body.tenant_id,
            "name": body.name,
            "status": "active",
            "limits": body.limits.model_dump(),
            "self_quota": {},
            "rate_limit": body.rate_limit.model_dump() if body.rate_limit else None,
            "created_at": at,
            "updated_at": at,
            "revision": time.time_ns(),
        }
        try:
            await self.tenants.insert(doc)
        except AlreadyExists as error:
            raise Conflict(f"tenant {body.tenant_id!r} already exists") from error
        try:
            admin = await self._insert_user(body.admin, tenant_id=body.tenant_id)
        except Conflict:
            await self.tenants.remove_unpublished(body.tenant_id)  # the id stays free
            raise
        admin_principal = Principal(
            subject=admin.user_id, user_id=admin.user_id, key_id=None, role="tenant-admin",
            tenant_id=body.tenant_id, scopes=list(ALL_SCOPES), via="api_key",
        )  # fmt: skip
        key = await self.create_key(
            admin_principal, ApiKeyCreate(name=f"first key of {admin.email}")
        )
        await self.publish_tenant(doc)
        return TenantCreated(tenant=self.tenant_view(doc), admin=admin, admin_key=key)

    async def _tenant(self, tenant_id: str) -> Document:
        doc = await self.tenants.get(tenant_id)
        if doc is None or doc["status"] == "deleted":
            raise NotFound(f"tenant {tenant_id!r} does not exist")
        return doc

    async def get_tenant(self, tenant_id: str) -> Tenant:
        return self.tenant_view(await self._tenant(tenant_id))

    async def list_tenants(self, *, after: str | None, limit: int) -> list[Tenant]:
        return [self.tenant_view(doc) for doc in await self.tenants.page(after=after, limit=limit)]

    async def update_tenant(self, tenant_id: str, body: TenantUpdate) -> Tenant:
        fields = body.model_dump(exclude_unset=True)
        if "rate_limit" in fields and body.rate_limit is None:
            fields["rate_limit"] = None  # back to the platform default
        return await self._change_tenant(tenant_id, fields)

    async def set_self_quota(self, tenant_id: str, body: SelfQuota) -> Tenant:
        doc = await self._tenant(tenant_id)
        limits = doc["limits"]
        over = [
            field
            for field, value in body.model_dump().items()
            if value is not None and limits.get(field) is not None and value > limits[field]
        ]
        if over:
            raise ValidationFailed(
                f"above the platform's limits: {', '.join(over)}",
                limits=QuotaLimits.model_validate(limits).model_dump(by_alias=True),
            )
        return await self._change_tenant(tenant_id, {"self_quota": body.model_dump()})

    async def _change_tenant(self, tenant_id: str, fields: Document) -> Tenant:
        # One writer per tenant document on this replica: publish what was written.
        async with self._tenant_locks.setdefault(tenant_id, asyncio.Lock()):
            await self._tenant(tenant_id)
            doc = await self.tenants.set_fields(tenant_id, fields, time.time_ns())
            assert doc is not None
            self._tenant_cache.forget(tenant_id)
            await self.publish_tenant(doc)
        return self.tenant_view(doc)

    async def delete_tenant(self, tenant_id: str) -> None:
        await self._change_tenant(tenant_id, {"status": "deleted"})
        for key_id in await self.keys.revoke_where(tenant_id=tenant_id):
            self._key_cache.forget(key_id)

    async def publish_tenant(self, doc: Document) -> None:
        """Tell the services; the sweep retries what did not get out."""
        data: TenantUpserted | TenantDeleted
        if doc["status"] == "deleted":
            data = TenantDeleted(tenant_id=doc["_id"])
        else:
            quota = effective_quota(doc["limits"], doc.get("self_quota") or {})
            data = TenantUpserted(
                tenant_id=doc["_id"], name=doc["name"], status=doc["status"],
                quota=TenantQuota.model_validate(quota),
            )  # fmt: skip
        try:
            await publish_event(
                self.broker, TENANTS, data, source=self.source,
                event_id=f"tenant-{doc['_id']}-{doc['revision']}",
            )  # fmt: skip
        except Exception:
            log.warning(
                "tenant event not published yet", extra={"tenant_id": doc["_id"]}, exc_info=True
            )
            return
        await self.tenants.mark_published(doc["_id"], doc["revision"])

    async def republish_tenants(self) -> None:
        for doc in await self.tenants.unpublished():
            await self.publish_tenant(doc)

    # --- users ---------------------------------------------------------------------

    @staticmethod
    def user_view(doc: Document) -> User:
        return User(
            user_id=doc["_id"], tenant_id=doc.get("tenant_id"), email=doc["email"],
            name=doc["name"], role=doc["role"], status=doc["status"],
            has_password=bool(doc.get("password_hash")), created_at=doc["created_at"],
        )  # fmt: skip

    async def _insert_user(self, body: UserCreate, *, tenant_id: str | None) -> User:
        doc: Document = {
            "_id": f"u-{secrets.token_hex(8)}",
            "tenant_id": tenant_id,
            "email": body.email.lower(),
            "name": body.name,
            "role": body.role,
            "status": "active",
            "password_hash": credentials.hash_password(body.password.get_secret_value())
            if body.password
            else None,
            "created_at": now(),
        }
        try:
            await self.users.insert(doc)
        except AlreadyExists as error:
            raise Conflict(f"a user with the email {body.email!r} already exists") from error
        return self.user_view(doc)

    @staticmethod
    def _check_assignable(principal: Principal, role: Role) -> None:
        """Platform admins manage platform admins; tenant admins their tenant's members."""
        allowed: set[Role] = (
            {"platform-admin"} if principal.tenant_id is None else {"tenant-admin", "tenant-user"}
        )
        if role not in allowed:
            raise Forbidden(f"you can give users the roles: {', '.join(sorted(allowed))}")

    async def create_user(self, principal: Principal, body: UserCreate) -> User:
        self._check_assignable(principal, body.role)
        return await self._insert_user(body, tenant_id=principal.tenant_id)

    async def _user(self, principal: Principal, user_id: str) -> Document:
        doc = await self.users.get(user_id)
        if doc is None or doc["status"] == "deleted" or doc.get("tenant_id") != principal.tenant_id:
            raise NotFound(f"user {user_id!r} does not exist")
        return doc

    async def get_user(self, principal: Principal, user_id: str) -> User:
        return self.user_view(await self._user(principal, user_id))

    async def list_users(
        self, principal: Principal, *, after: str | None, limit: int
    ) -> list[User]:
        docs = await self.users.page(principal.tenant_id, after=after, limit=limit)
        return [self.user_view(doc) for doc in docs]

    async def update_user(self, principal: Principal, user_id: str, body: UserUpdate) -> User:
        doc = await self._user(principal, user_id)
        if user_id == principal.user_id and (body.role or body.status):
            raise ValidationFailed("you cannot change your own role or status; ask another admin")
        fields: Document = body.model_dump(exclude_unset=True, exclude={"password"})
        if body.role is not None:
            self._check_assignable(principal, body.role)
        if body.password is not None:
            fields["password_hash"] = credentials.hash_password(body.password.get_secret_value())
        updated = await self.users.set_fields(doc["_id"], fields)
        assert updated is not None
        self._user_cache.forget(user_id)
        if body.status == "disabled" or (body.role and body.role != doc["role"]):
            # Keys carry the role they were minted with: a changed user starts afresh.
            await self._revoke_user_keys(user_id)
        return self.user_view(updated)

    async def delete_user(self, principal: Principal, user_id: str) -> None:
        await self._user(principal, user_id)
        if user_id == principal.user_id:
            raise ValidationFailed("you cannot delete yourself; ask another admin")
        await self.users.delete(user_id)
        self._user_cache.forget(user_id)
        await self._revoke_user_keys(user_id)

    async def _revoke_user_keys(self, user_id: str) -> None:
        for key_id in await self.keys.revoke_where(user_id=user_id):
            self._key_cache.forget(key_id)

    # --- API keys ------------------------------------------------------------------

    @staticmethod
    def key_view(doc: Document) -> ApiKey:
        return ApiKey(
            key_id=doc["_id"], name=doc["name"], user_id=doc.get("user_id"),
            tenant_id=doc.get("tenant_id"), role=doc["role"],
            scopes=doc.get("scopes") or list(ALL_SCOPES), created_at=doc["created_at"],
            expires_at=doc.get("expires_at"), revoked_at=doc.get("revoked_at"),
            last_used_at=doc.get("last_used_at"),
        )  # fmt: skip

    async def create_key(self, principal: Principal, body: ApiKeyCreate) -> ApiKeyCreated:
        role = body.role or principal.role
        if _ROLE_RANK[role] > _ROLE_RANK[principal.role] or (
            (role == "platform-admin") != (principal.role == "platform-admin")
        ):
            raise Forbidden(f"a {principal.role} cannot create a {role} key")
        scopes = body.scopes or list(principal.scopes)
        if extra := sorted(set(scopes) - set(principal.scopes)):
            raise InsufficientScope(f"your credential lacks the scopes {extra}", scopes=extra)
        at = now()
        expires_at = body.expires_at or at + DEFAULT_KEY_LIFETIME
        if not at < expires_at <= at + MAX_KEY_LIFETIME:
            raise ValidationFailed("expiresAt must be in the future and at most a year away")
        key_id, secret = credentials.new_api_key()
        doc: Document = {
            "_id": key_id,
            "secret_hash": credentials.hash_api_key(secret),
            "name": body.name,
            "user_id": principal.user_id,
            "tenant_id": principal.tenant_id,
            "role": role,
            "scopes": sorted(set(scopes)),
            "created_at": at,
            "expires_at": expires_at,
            "revoked_at": None,
            "last_used_at": None,
        }
        await self.keys.insert(doc)
        return ApiKeyCreated(**self.key_view(doc).model_dump(), secret=secret)

    def _may_see_key(self, principal: Principal, doc: Document) -> bool:
        if doc.get("tenant_id") != principal.tenant_id:
            return False
        # Admins see every key of their tenant (or of the platform); members their own.
        return principal.role != "tenant-user" or doc.get("user_id") == principal.user_id

    async def _key(self, principal: Principal, key_id: str) -> Document:
        doc = await self.keys.get(key_id)
        if doc is None or not self._may_see_key(principal, doc):
            raise NotFound(f"API key {key_id!r} does not exist")
        return doc

    async def get_key(self, principal: Principal, key_id: str) -> ApiKey:
        return self.key_view(await self._key(principal, key_id))

    async def list_keys(
        self, principal: Principal, *, after: str | None, limit: int
    ) -> list[ApiKey]:
        only_user = principal.user_id if principal.role == "tenant-user" else None
        docs = await self.keys.page(
            tenant_id=principal.tenant_id, user_id=only_user, after=after, limit=limit
        )
        return [self.key_view(doc) for doc in docs]

    async def revoke_key(self, principal: Principal, key_id: str) -> ApiKey:
        await self._key(principal, key_id)
        doc = await self.keys.revoke(key_id)
        assert doc is not None
        self._key_cache.forget(key_id)
        return self.key_view(doc)
