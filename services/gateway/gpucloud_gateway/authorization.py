"""What a caller may do: roles, scopes, a suspended tenant's reads only, and rate limits."""

from __future__ import annotations

from gpucloud_libs.errors import Forbidden
from gpucloud_libs.identity import Role

from .identity_cache import IdentityCache
from .ratelimit import RateLimiter
from .schemas import Principal, RateLimit, Scope
from .settings import GatewaySettings


class TenantSuspended(Forbidden):
    code = "tenant_suspended"
    title = "The tenant is suspended"


class MachineKeyRefused(Forbidden):
    code = "machine_key_refused"
    title = "A machine key calls its inference services' URLs alone"


def refuse_machine_key(principal: Principal) -> None:
    """A machine key of inference services (`serviceIDs`) is handed to an OpenAI
    client: it calls those services' URLs and nothing of the API, kubeconfig and keys
    included, whatever its maker's role (review N1)."""
    if principal.service_ids is not None:
        raise MachineKeyRefused(
            f"this key calls the URLs of the inference services {principal.service_ids} "
            "alone; use a key of your own for the API",
            service_ids=principal.service_ids,
        )


class InsufficientScope(Forbidden):
    code = "insufficient_scope"
    title = "The credential's scopes do not allow this"


def default_rate_limit(settings: GatewaySettings) -> RateLimit:
    """A tenant's rate limit unless the platform admin set one."""
    return RateLimit(
        requests_per_s=settings.tenant_rate_limit_per_s, burst=settings.tenant_rate_limit_burst
    )


class Authorizer:
    def __init__(
        self, settings: GatewaySettings, cache: IdentityCache, limiter: RateLimiter
    ) -> None:
        self._settings = settings
        self._cache = cache
        self._limiter = limiter

    async def authorize(
        self, principal: Principal, *, roles: frozenset[Role], scope: Scope, method: str
    ) -> None:
        await self.permit(principal, roles=roles, scope=scope, method=method)
        await self.rate_limit(principal)

    async def permit(
        self, principal: Principal, *, roles: frozenset[Role], scope: Scope, method: str
    ) -> None:
        """Whether the caller may, spending no rate-limit token: an open connection
        checked again (long_connections.py) is no new request."""
        refuse_machine_key(principal)
        if principal.role not in roles:
            raise Forbidden(f"this action needs one of the roles: {', '.join(sorted(roles))}")
        if scope not in principal.scopes:
            raise InsufficientScope(f"this credential lacks the scope {scope!r}", scope=scope)
        await self.check_writable(principal, method)

    async def check_writable(self, principal: Principal, method: str) -> None:
        """A suspended tenant reads and changes nothing: through the API, and through
        its instances' and services' URLs alike (review M8)."""
        if principal.tenant_id is not None and method not in {"GET", "HEAD", "OPTIONS"}:
            tenant = await self._cache.tenant(principal.tenant_id)
            if tenant is not None and tenant["status"] == "suspended":
                raise TenantSuspended("the tenant is suspended: reads only")

    async def rate_limit(self, principal: Principal) -> None:
        if principal.key_id is not None:
            self._limiter.take(
                f"key:{principal.key_id}",
                rate=self._settings.key_rate_limit_per_s,
                burst=self._settings.key_rate_limit_burst,
                what="this API key",
            )
        if principal.tenant_id is not None:
            limit = await self._tenant_rate_limit(principal.tenant_id)
            self._limiter.take(
                f"tenant:{principal.tenant_id}",
                rate=limit.requests_per_s,
                burst=limit.burst,
                what="this tenant",
            )

    async def _tenant_rate_limit(self, tenant_id: str) -> RateLimit:
        tenant = await self._cache.tenant(tenant_id)
        if tenant is not None and tenant.get("rate_limit"):
            return RateLimit.model_validate(tenant["rate_limit"])
        return default_rate_limit(self._settings)
