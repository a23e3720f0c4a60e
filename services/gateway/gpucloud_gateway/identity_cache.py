"""What authentication reads on every request, kept a couple of seconds.

Authentication reads by `_id` only, so a call through the gateway usually
costs no database round trip. A change on this replica forgets the entry at
once; another replica notices within `auth_cache_ttl_s`.
"""

from __future__ import annotations

from .cache import TtlCache
from .documents import ApiKeyDoc, TenantDoc, UserDoc
from .store import ApiKeyStore, TenantStore, UserStore


class IdentityCache:
    def __init__(
        self, keys: ApiKeyStore, users: UserStore, tenants: TenantStore, *, ttl_s: float
    ) -> None:
        self._keys, self._users, self._tenants = keys, users, tenants
        self._key_cache = TtlCache[str, ApiKeyDoc | None](ttl_s)
        self._user_cache = TtlCache[str, UserDoc | None](ttl_s)
        self._tenant_cache = TtlCache[str, TenantDoc | None](ttl_s)

    async def key(self, key_id: str) -> ApiKeyDoc | None:
        return await self._key_cache.get(key_id, self._keys.get)

    async def user(self, user_id: str) -> UserDoc | None:
        return await self._user_cache.get(user_id, self._users.get)

    async def tenant(self, tenant_id: str) -> TenantDoc | None:
        return await self._tenant_cache.get(tenant_id, self._tenants.get)

    def forget_keys(self, *key_ids: str) -> None:
        for key_id in key_ids:
            self._key_cache.forget(key_id)

    def forget_user(self, user_id: str) -> None:
        self._user_cache.forget(user_id)

    def forget_tenant(self, tenant_id: str) -> None:
        self._tenant_cache.forget(tenant_id)
