"""Who is calling: an API key, or a session token meant for the audience at hand."""

from __future__ import annotations

import time
from typing import Literal

from gpucloud_libs.clock import aware, now
from gpucloud_libs.errors import Unauthenticated
from gpucloud_libs.project_shares import is_member, visible_projects

from . import credentials
from .background import Background
from .credentials import API_AUDIENCE, BOOTSTRAP_KEY_ID
from .documents import ApiKeyDoc, TenantDoc
from .identity_cache import IdentityCache
from .schemas import ALL_SCOPES, Principal, Scope
from .settings import GatewaySettings
from .store import ApiKeyStore

#: last_used_at is written at most this often per key: it is for humans, not billing.
TOUCH_INTERVAL_S = 60.0


def _check_live(key: ApiKeyDoc, what: str) -> None:
    if key["revoked_at"] is not None:
        raise Unauthenticated(f"{what} has been revoked")
    expires_at = key["expires_at"]
    if expires_at is not None and aware(expires_at) <= now():
        raise Unauthenticated(f"{what} has expired")


def _check_project(key: ApiKeyDoc, tenant: TenantDoc | None) -> None:
    """A key of one project works while its user is a member of the project: it ends
    when they leave it, or when the project is deleted (decision 139)."""
    project = key.get("project")
    if project is None:
        return
    projects = tenant.get("projects") if tenant is not None else None
    if not is_member(projects, project, key["user_id"]):
        raise Unauthenticated(
            f"the API key is for project {project!r}, which its user is no longer in"
        )


def _projects_seen(
    tenant: TenantDoc | None, user_id: str | None, role: str, key_project: str | None
) -> tuple[str, ...] | None:
    projects = tenant.get("projects") if tenant is not None else None
    return visible_projects(projects, user_id=user_id, role=role, key_project=key_project)


class Authenticator:
    def __init__(
        self,
        settings: GatewaySettings,
        keys: ApiKeyStore,
        cache: IdentityCache,
        background: Background,
    ) -> None:
        self._keys = keys
        self._cache = cache
        self._background = background
        self._session_secret = settings.session_secret.get_secret_value()
        self._touched: dict[str, float] = {}

    async def install_bootstrap_admin(self, presented: str) -> None:
        credentials.check_bootstrap_key(presented)
        await self._keys.upsert_bootstrap(BOOTSTRAP_KEY_ID, credentials.hash_api_key(presented))
        self._cache.forget_keys(BOOTSTRAP_KEY_ID)

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
        token = credentials.read_token(self._session_secret, presented, audience=audience)
        if token is None:
            raise Unauthenticated("the credential is not a valid, unexpired API key or token")
        return await self.from_source(
            token.source, token.source_id, token.scopes,
            via="token" if audience == API_AUDIENCE else "session_cookie",
            version=token.source_version, sso=token.sso,
        )  # fmt: skip

    async def authenticate_token(self, presented: str | None, *, audience: str) -> Principal:
        """Like `authenticate`, for a session token alone: where a browser carries the
        credential (a link, a cookie), an API key has no business."""
        if presented and presented.startswith(credentials.KEY_PREFIX):
            raise Unauthenticated("an API key goes in the Authorization header, not here")
        return await self.authenticate(presented, audience=audience)

    async def _from_api_key(self, presented: str) -> Principal:
        key_id = credentials.parse_api_key(presented)
        doc = await self._cache.key(key_id) if key_id else None
        if doc is None or not credentials.api_key_matches(presented, doc["secret_hash"]):
            raise Unauthenticated("the API key is unknown")
        _check_live(doc, "the API key")
        tenant = await self.check_tenant(doc.get("tenant_id"))
        _check_project(doc, tenant)
        self._touch(doc["_id"])
        return Principal(
            subject=doc.get("user_id") or doc["_id"],
            user_id=doc.get("user_id"),
            key_id=doc["_id"],
            role=doc["role"],
            tenant_id=doc.get("tenant_id"),
            scopes=doc.get("scopes") or list(ALL_SCOPES),
            via="api_key",
            service_ids=doc.get("service_ids"),
            project=doc.get("project"),
            projects=_projects_seen(tenant, doc.get("user_id"), doc["role"], doc.get("project")),
            expires_at=doc["expires_at"],
        )

    async def from_source(
        self,
        source: Literal["user", "key"],
        source_id: str,
        scopes: list[Scope],
        *,
        via: Literal["token", "session_cookie", "console"],
        version: int = 0,
        sso: bool = False,
    ) -> Principal:
        """A token or a console session acts as what its source key or user is now, read
        back (a few seconds' cache): revocation, expiry and a changed role take effect
        on them too."""
        if source == "key":
            key = await self._cache.key(source_id)
            if key is None:
                raise Unauthenticated("the API key this token came from no longer exists")
            _check_live(key, "the API key this token came from")
            allowed = key["scopes"] or list(ALL_SCOPES)
            user_id, key_id = key["user_id"], key["_id"]
            role, tenant_id = key["role"], key["tenant_id"]
            scopes = [scope for scope in scopes if scope in allowed]
            service_ids, project = key.get("service_ids"), key.get("project")
            source_key: ApiKeyDoc | None = key
            expires_at = key["expires_at"]
        else:
            user = await self._cache.user(source_id)
            if user is None or user["status"] != "active":
                raise Unauthenticated("the user this token belongs to is disabled or deleted")
            if user.get("credentials_version", 0) != version:
                raise Unauthenticated("the user's password has changed since; sign in again")
            user_id, key_id = user["_id"], None
            role, tenant_id, scopes = user["role"], user["tenant_id"], list(scopes)
            service_ids, project, source_key, expires_at = None, None, None, None
        tenant = await self.check_tenant(tenant_id)
        if source_key is not None:
            _check_project(source_key, tenant)
        return Principal(
            subject=user_id or source_id,
            user_id=user_id,
            key_id=key_id,
            role=role,
            tenant_id=tenant_id,
            scopes=scopes,
            via=via,
            service_ids=service_ids,
            source_version=version,
            project=project,
            projects=_projects_seen(tenant, user_id, role, project),
            sso=sso,
            expires_at=expires_at,
        )

    async def check_tenant(self, tenant_id: str | None) -> TenantDoc | None:
        """The credential's tenant (None for a platform credential), while it exists."""
        if tenant_id is None:
            return None
        tenant = await self._cache.tenant(tenant_id)
        if tenant is None or tenant["status"] == "deleted":
            raise Unauthenticated("the tenant of this credential no longer exists")
        return tenant

    def _touch(self, key_id: str) -> None:
        last = self._touched.get(key_id, 0.0)
        if time.monotonic() - last < TOUCH_INTERVAL_S:
            return
        self._touched[key_id] = time.monotonic()
        self._background.spawn(self._keys.touch(key_id, now()))
