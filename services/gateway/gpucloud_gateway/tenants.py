"""Tenants (platform admin) and their quotas: the platform's limits, the tenant admin's
tighter self-quota, and the rate limit. Every change is published as a tenant event
after its write, with a revision id; the sweep retries what did not get out."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import timedelta

from faststream.kafka import KafkaBroker

from gpucloud_libs.clock import now
from gpucloud_libs.errors import Conflict, NotFound, ValidationFailed
from gpucloud_libs.events import ProjectShare, TenantDeleted, TenantQuota, TenantUpserted
from gpucloud_libs.events import UserLimits as UserLimitsEvent
from gpucloud_libs.kafka import publish_event
from gpucloud_libs.mongo import Document
from gpucloud_libs.project_shares import carved_gpus
from gpucloud_libs.topics import TENANTS

from .api_keys import ApiKeys
from .authorization import default_rate_limit
from .documents import TenantDoc
from .identity_cache import IdentityCache
from .schemas import (
    ALL_SCOPES,
    ApiKeyCreate,
    Principal,
    QuotaLimits,
    RateLimit,
    SelfQuota,
    Tenant,
    TenantCreate,
    TenantCreated,
    TenantUpdate,
    UserLimits,
)
from .settings import GatewaySettings
from .store import AlreadyExists, TenantMap, TenantStore
from .users import Users

log = logging.getLogger(__name__)

#: A tenant's publish runs right after its write; the sweep leaves younger writes to it.
PUBLISH_GRACE = timedelta(seconds=5)


def effective_quota(limits: Document, self_quota: Document) -> Document:
    """The tighter of the platform's limit and the tenant admin's own, field by field."""
    tighter: Document = {}
    for field, limit in limits.items():
        own = self_quota.get(field)
        tighter[field] = limit if own is None else own if limit is None else min(own, limit)
    return tighter


class Tenants:
    def __init__(
        self,
        settings: GatewaySettings,
        tenants: TenantStore,
        cache: IdentityCache,
        users: Users,
        api_keys: ApiKeys,
        broker: KafkaBroker,
        *,
        source: str,
    ) -> None:
        self._settings = settings
        self._tenants = tenants
        self._cache = cache
        self._users = users
        self._api_keys = api_keys
        self._broker = broker
        self._source = source
        self._locks: dict[str, asyncio.Lock] = {}

    def view(self, doc: TenantDoc) -> Tenant:
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
            else default_rate_limit(self._settings),
            queue_weight=doc.get("queue_weight", 1.0),
            user_limits={
                user_id: UserLimits.model_validate(limits)
                for user_id, limits in (doc.get("user_limits") or {}).items()
            },
            created_at=doc["created_at"],
            updated_at=doc["updated_at"],
        )

    async def create(self, body: TenantCreate) -> TenantCreated:
        at = now()
        doc: TenantDoc = {
            "_id": body.tenant_id,
            "name": body.name,
            "status": "active",
            "limits": body.limits.model_dump(),
            "self_quota": {},
            "rate_limit": body.rate_limit.model_dump() if body.rate_limit else None,
            "queue_weight": body.queue_weight,
            "created_at": at,
            "updated_at": at,
            "revision": time.time_ns(),
        }
        try:
            await self._tenants.insert(doc)
        except AlreadyExists as error:
            raise Conflict(f"tenant {body.tenant_id!r} already exists") from error
        try:
            admin = await self._users.insert(body.admin, tenant_id=body.tenant_id)
        except Conflict:
            await self._tenants.remove_unpublished(body.tenant_id)  # the id stays free
            raise
        admin_principal = Principal(
            subject=admin.user_id, user_id=admin.user_id, key_id=None, role="tenant-admin",
            tenant_id=body.tenant_id, scopes=list(ALL_SCOPES), via="api_key",
        )  # fmt: skip
        key = await self._api_keys.create(
            admin_principal, ApiKeyCreate(name=f"first key of {admin.email}")
        )
        await self.publish(doc)
        return TenantCreated(tenant=self.view(doc), admin=admin, admin_key=key)

    async def existing(self, tenant_id: str) -> TenantDoc:
        """The tenant's document; a 404 for a deleted or unknown one."""
        doc = await self._tenants.get(tenant_id)
        if doc is None or doc["status"] == "deleted":
            raise NotFound(f"tenant {tenant_id!r} does not exist")
        return doc

    async def get(self, tenant_id: str) -> Tenant:
        return self.view(await self.existing(tenant_id))

    async def list(self, *, after: str | None, limit: int) -> list[Tenant]:
        return [self.view(doc) for doc in await self._tenants.page(after=after, limit=limit)]

    async def update(self, tenant_id: str, body: TenantUpdate) -> Tenant:
        fields = body.model_dump(exclude_unset=True)
        if "rate_limit" in fields and body.rate_limit is None:
            fields["rate_limit"] = None  # back to the platform default
        if "queue_weight" in fields and body.queue_weight is None:
            fields["queue_weight"] = 1.0
        return await self._change(tenant_id, fields)

    async def set_self_quota(self, tenant_id: str, body: SelfQuota) -> Tenant:
        return await self._change(
            tenant_id,
            {"self_quota": body.model_dump()},
            check=lambda doc: _self_quota_fits(doc, body),
        )

    async def set_user_limits(
        self, principal: Principal, user_id: str, body: UserLimits
    ) -> UserLimits:
        """A tenant admin's limits on one user of the tenant, within the tenant's quota
        as it is when they are written; both unset takes them off."""
        assert principal.tenant_id is not None
        await self._users.get(principal, user_id)  # a 404 outside the admin's tenant

        def limited(doc: TenantDoc) -> Document | None:
            _user_limits_fit(doc, body)
            return None if body == UserLimits() else body.model_dump()

        await self.edit_entry(principal.tenant_id, "user_limits", user_id, limited)
        return body

    async def forget_user_limits(self, tenant_id: str, user_id: str) -> None:
        """The limits of a user who is removed."""
        await self.change_entry(tenant_id, "user_limits", user_id, None)

    async def change_entry(
        self, tenant_id: str, field: TenantMap, key: str, value: Document | None
    ) -> TenantDoc:
        """Set (or, None, remove) one entry of a map of the tenant, and publish the
        tenant's new revision."""
        return await self.edit_entry(tenant_id, field, key, lambda _: value)

    async def edit_entry(
        self, tenant_id: str, field: TenantMap, key: str,
        edit: Callable[[TenantDoc], Document | None],
    ) -> TenantDoc:  # fmt: skip
        """Change one entry of a map of the tenant to what `edit` makes of the tenant as
        it is now (it may raise to refuse), and publish the new revision; an entry left
        as it was is not written. Read, written and published under the tenant's change
        lock, held across replicas, so two changes at once each see the other's (two
        members joining on two replicas) and their events go out in order."""
        async with self._lock(tenant_id):
            tenant = await self.existing(tenant_id)
            value = edit(tenant)
            if value == (tenant.get(field) or {}).get(key):
                return tenant
            revision = max(time.time_ns(), tenant["revision"] + 1)
            doc = await self._tenants.set_entry(tenant_id, field, key, value, revision)
            assert doc is not None
            self._cache.forget_tenant(tenant_id)
            await self.publish(doc)
        return doc

    @asynccontextmanager
    async def _lock(self, tenant_id: str) -> AsyncIterator[None]:
        """This replica's lock first (its own changes wait here, not on the store),
        then the store's, which the other replicas take too."""
        async with (
            self._locks.setdefault(tenant_id, asyncio.Lock()),
            self._tenants.changing(tenant_id),
        ):
            yield

    async def _change(
        self, tenant_id: str, fields: Document, *, check: Callable[[TenantDoc], None] | None = None
    ) -> Tenant:
        """Write `fields` and publish the new revision, under the tenant's change lock;
        `check` refuses from the tenant as it is then (a 422)."""
        async with self._lock(tenant_id):
            current = await self.existing(tenant_id)
            if check is not None:
                check(current)
            doc = await self._tenants.set_fields(tenant_id, fields, time.time_ns())
            assert doc is not None
            self._cache.forget_tenant(tenant_id)
            await self.publish(doc)
        return self.view(doc)

    async def delete(self, tenant_id: str) -> None:
        await self._change(tenant_id, {"status": "deleted"})
        await self._api_keys.revoke_where(tenant_id=tenant_id, end_access=False)

    async def publish(self, doc: TenantDoc) -> None:
        """Tell the services; the sweep retries what did not get out."""
        data: TenantUpserted | TenantDeleted
        if doc["status"] == "deleted":
            data = TenantDeleted(tenant_id=doc["_id"])
        else:
            quota = effective_quota(doc["limits"], doc.get("self_quota") or {})
            data = TenantUpserted(
                tenant_id=doc["_id"], name=doc["name"], status=doc["status"],
                quota=TenantQuota.model_validate(quota),
                queue_weight=doc.get("queue_weight", 1.0),
                user_limits={
                    user_id: UserLimitsEvent.model_validate(limits)
                    for user_id, limits in (doc.get("user_limits") or {}).items()
                },
                projects={
                    project_id: ProjectShare.model_validate(project)
                    for project_id, project in (doc.get("projects") or {}).items()
                },
            )  # fmt: skip
        try:
            await publish_event(
                self._broker, TENANTS, data, source=self._source,
                event_id=f"tenant-{doc['_id']}-{doc['revision']}",
            )  # fmt: skip
        except Exception:
            log.warning(
                "tenant event not published yet", extra={"tenant_id": doc["_id"]}, exc_info=True
            )
            return
        await self._tenants.mark_published(doc["_id"], doc["revision"])

    async def republish(self, *, settled: bool = True) -> None:
        """Publish what did not get out. With `settled`, only tenants written more than
        PUBLISH_GRACE ago: a write that is still publishing inline is left to finish,
        instead of racing it to a duplicate of the same event. Under each tenant's change
        lock, read again: a newer revision published meanwhile is not followed by an
        older one."""
        written_before = now() - PUBLISH_GRACE if settled else None
        for stale in await self._tenants.unpublished(written_before):
            async with self._lock(stale["_id"]):
                doc = await self._tenants.get(stale["_id"])
                if doc is not None and doc.get("published_revision") != doc["revision"]:
                    await self.publish(doc)


def _self_quota_fits(doc: TenantDoc, body: SelfQuota) -> None:
    """A tenant admin's own quota is within the platform's limits and above what the
    projects' shares carve; a 422 otherwise."""
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
    carved = carved_gpus(p.get("max_gpus") for p in (doc.get("projects") or {}).values())
    if body.max_gpus is not None and body.max_gpus < carved:
        # The tenant admin owns both figures: a quota its projects' shares overrun
        # would leave `default` nothing and the shares unkeepable; lower them first.
        raise ValidationFailed(
            f"the projects' GPU shares come to {carved}, above {body.max_gpus}; lower them first",
            field="maxGpus",
        )


def _user_limits_fit(doc: TenantDoc, body: UserLimits) -> None:
    """A user's limits fit the tenant's quota; a 422 otherwise."""
    quota = effective_quota(doc["limits"], doc.get("self_quota") or {})
    above = [
        f"{name} {value} is above the tenant's {quota[field]}"
        for name, value, field in (
            ("maxGpus", body.max_gpus, "max_gpus"),
            ("monthlySpendCents", body.monthly_spend_cents, "monthly_spend_cap_cents"),
        )
        if value is not None and quota.get(field) is not None and value > quota[field]
    ]
    if above:
        raise ValidationFailed(f"a user's limits fit the tenant's quota: {'; '.join(above)}")
