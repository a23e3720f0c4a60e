"""Each tenant's quota usage, exact under concurrent starts, on any MongoDB-wire store.

One document per tenant, `{count, gpus, claims: {instance id: gpus}, owners: {instance
id: user id}}`, holds every admitted workload that is not yet terminal, and the user
each was started by (a user's own GPU limit counts theirs). FerretDB applies an update as a read,
then a write, so two unlocked updates of one document can both pass a filter or
lose each other's counts. Every change is therefore made under the tenant's lock:
a document with a unique `_id`, whose insert every MongoDB-wire store makes atomic.

Two things keep this off the start path's clock:
- Group commit: concurrent changes of one tenant in one replica are applied as a
  batch, one write per batch.
- Held locks: a replica keeps a lock it took for up to HOLD_S, and for LINGER_S
  after its last change. While it holds the lock no one else writes the document,
  so it keeps the document in memory and a change costs one write, not a lock, a
  read, a write and an unlock. Another replica waits at most that long for it.
A replica that dies holding a lock loses it after LOCK_TTL; holders stop using a
lock well before that (HOLD_S), so clocks that differ by less than the gap are safe.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, NamedTuple

from pymongo import ASCENDING, IndexModel

from gpucloud_libs.locks import LeasedLocks
from gpucloud_libs.mongo import Database, Document, IndexPlan

from .admission import UserCap, claim_refusal
from .documents import QuotaDoc

QUOTA_USAGE = "quota_usage"
QUOTA_LOCKS = "quota_locks"
#: Claims from before per-tenant documents: read once per tenant, then emptied.
QUOTA_CLAIMS = "quota_claims"

INDEXES: IndexPlan = {QUOTA_CLAIMS: [IndexModel([("tenant_id", ASCENDING)], name="tenant")]}

#: A lock older than this belongs to a holder that died; the next start takes it.
LOCK_TTL = timedelta(seconds=5)
#: How long a change waits for its tenant's lock before answering 503.
LOCK_WAIT_S = 10.0
#: The longest a replica uses a lock it took (well inside LOCK_TTL).
HOLD_S = 2.0
#: How long a replica keeps an idle lock, for the next change of the same tenant.
LINGER_S = 0.5


class QuotaClaim(NamedTuple):
    """A claim's outcome, and the tenant's usage (instances, GPUs) right after it, with
    the GPUs the claim's user holds (0 for a claim that names no user)."""

    admitted: bool
    instances: int
    gpus: int
    user_gpus: int = 0


class Usages(NamedTuple):
    """Every tenant's (instances, GPUs) held, and every (tenant, user)'s GPUs."""

    tenants: dict[str, tuple[int, int]]
    users: dict[tuple[str, str], int]


def user_gpus(claims: dict[str, int], owners: dict[str, str], user_id: str) -> int:
    """The GPUs the user's claims hold."""
    return sum(gpus for key, gpus in claims.items() if owners.get(key) == user_id)


@dataclass(frozen=True)
class _Change:
    """A claim (with the quota it must fit) or, with no quota, a release."""

    instance_id: str
    gpus: int
    quota: QuotaDoc | None
    #: Change the GPUs of a claim already held (an inference service's maximum).
    resize: bool = False
    #: The configuration generation the GPUs are for: a claim never goes back to an
    #: older generation's (concurrent changes of one service, review M2).
    generation: int | None = None
    #: The GPUs of a configuration already recorded, which passed its own check:
    #: restored without checking the quota again.
    in_force: bool = False
    #: Whose claim it is, held to their own limit too.
    user: UserCap | None = None

    def apply(
        self, claims: dict[str, int], generations: dict[str, int], owners: dict[str, str]
    ) -> bool:
        if self.quota is None:
            generations.pop(self.instance_id, None)
            owners.pop(self.instance_id, None)
            return claims.pop(self.instance_id, None) is not None
        if self.generation is not None and generations.get(self.instance_id, 0) > self.generation:
            return True  # a newer generation's claim stands
        held = claims.get(self.instance_id)
        if held is not None and (not self.resize or held == self.gpus):
            self._note_generation(generations)
            return True  # a retried claim that went through
        # What the others hold, without copying the claims (thousands, for a big queue).
        others, others_gpus = len(claims) - (held is not None), sum(claims.values()) - (held or 0)
        if not self.in_force and self.gpus > (held or 0):
            refusal = claim_refusal(
                self.quota, self.user, instances=others, gpus=others_gpus,
                user_gpus=self._users_others(claims, owners, held or 0), wanted=self.gpus,
            )  # fmt: skip
            if refusal is not None:
                return False
        claims[self.instance_id] = self.gpus
        if self.user is not None:
            owners[self.instance_id] = self.user.user_id
        self._note_generation(generations)
        return True

    def _users_others(self, claims: dict[str, int], owners: dict[str, str], held: int) -> int:
        """What the claim's user holds besides this claim (a claim of no one counts for
        no one); 0 when no limit holds them, as nothing is compared then."""
        if self.user is None or self.user.max_gpus is None:
            return 0
        ours = owners.get(self.instance_id) == self.user.user_id
        return user_gpus(claims, owners, self.user.user_id) - (held if ours else 0)

    def _note_generation(self, generations: dict[str, int]) -> None:
        if self.generation is not None:
            generations[self.instance_id] = self.generation


@dataclass
class _Hold:
    """A tenant's lock this replica holds, and the document as it last wrote it."""

    token: str
    until: float  # time.monotonic()
    claims: dict[str, int]
    #: The configuration generation each resized claim is for (services only).
    generations: dict[str, int]
    #: The user each claim is for, where it names one.
    owners: dict[str, str]


class QuotaLedger:
    def __init__(self, db: Database) -> None:
        self._usage = db[QUOTA_USAGE]
        self._locks = LeasedLocks(
            db[QUOTA_LOCKS], ttl=LOCK_TTL, wait_s=LOCK_WAIT_S,
            busy="the tenant's quota is busy with other starts; retry",
        )  # fmt: skip
        self._old_claims = db[QUOTA_CLAIMS]
        self._pending: dict[str, list[tuple[_Change, asyncio.Future[QuotaClaim]]]] = {}
        self._draining: set[str] = set()
        self._holds: dict[str, _Hold] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def claim(
        self, tenant_id: str, instance_id: str, gpus: int, quota: QuotaDoc,
        user: UserCap | None = None,
    ) -> QuotaClaim:  # fmt: skip
        """Claim `gpus` and one instance if they fit the quota (and the user's own limit).
        Claims are keyed by instance, so a retried claim for the same instance counts once."""
        return await self._change(tenant_id, _Change(instance_id, gpus, quota, user=user))

    async def resize(
        self, tenant_id: str, instance_id: str, gpus: int, quota: QuotaDoc, *, generation: int,
        user: UserCap | None = None,
    ) -> QuotaClaim:  # fmt: skip
        """Hold `gpus` for a claim, made or not yet, for configuration `generation`: a
        growth must fit the quota, a shrink always passes; an older generation's never
        replaces a newer one's."""
        change = _Change(instance_id, gpus, quota, resize=True, generation=generation, user=user)
        return await self._change(tenant_id, change)

    async def restore(
        self, tenant_id: str, instance_id: str, gpus: int, quota: QuotaDoc, *, generation: int
    ) -> None:
        """Hold what the recorded configuration `generation` holds, after a concurrent
        change's resize overwrote it; it passed the quota when it was made."""
        change = _Change(
            instance_id, gpus, quota, resize=True, generation=generation, in_force=True
        )
        await self._change(tenant_id, change)

    async def release(self, tenant_id: str, instance_id: str) -> None:
        await self._change(tenant_id, _Change(instance_id, 0, None))

    async def usage(self, tenant_id: str) -> tuple[int, int]:
        """What the tenant holds as last written: (workloads, GPUs). Advisory (the
        admission queue's ordering); `claim` alone decides what fits."""
        doc = await self._usage.find_one({"_id": tenant_id}, {"claims": 1})
        claims: dict[str, int] = (doc or {}).get("claims") or {}
        return len(claims), sum(claims.values())

    async def usages(self) -> Usages:
        """`usage` of every tenant that has held anything, and the GPUs each of their
        users holds, in one read (advisory, as `usage`)."""
        found = Usages({}, {})
        async for doc in self._usage.find({}, {"claims": 1, "owners": 1}):
            claims: dict[str, int] = doc.get("claims") or {}
            owners: dict[str, str] = doc.get("owners") or {}
            found.tenants[doc["_id"]] = (len(claims), sum(claims.values()))
            for key, gpus in claims.items():
                if key in owners:
                    user = (doc["_id"], owners[key])
                    found.users[user] = found.users.get(user, 0) + gpus
        return found

    async def user_usage(self, tenant_id: str, user_id: str) -> int:
        """The GPUs the user's workloads hold, as last written (advisory, as `usage`)."""
        doc = await self._usage.find_one({"_id": tenant_id}, {"claims": 1, "owners": 1})
        doc = doc or {}
        return user_gpus(doc.get("claims") or {}, doc.get("owners") or {}, user_id)

    async def claimed(self) -> list[tuple[str, str]]:
        """Every (tenant, instance) with a claim."""
        keys = [
            (claim["tenant_id"], claim["_id"].partition("/")[2])
            async for claim in self._old_claims.find({}, {"tenant_id": 1})
        ]
        async for doc in self._usage.find({}, {"claims": 1}):
            keys += [(doc["_id"], instance_id) for instance_id in doc.get("claims") or {}]
        return keys

    async def close(self) -> None:
        """Give back every lock held, so other replicas need not wait for LOCK_TTL."""
        for tenant_id in list(self._holds):
            await self._let_go(tenant_id)

    # --- batching ------------------------------------------------------------------

    async def _change(self, tenant_id: str, change: _Change) -> QuotaClaim:
        done: asyncio.Future[QuotaClaim] = asyncio.get_running_loop().create_future()
        self._pending.setdefault(tenant_id, []).append((change, done))
        if tenant_id not in self._draining:
            self._draining.add(tenant_id)
            self._spawn(self._drain(tenant_id))
        return await done

    async def _drain(self, tenant_id: str) -> None:
        """Apply the tenant's waiting changes, in arrival order, a batch at a time."""
        try:
            while batch := self._pending.pop(tenant_id, []):
                try:
                    results = await self._apply(tenant_id, [change for change, _ in batch])
                except Exception as error:  # every waiter of the batch gets it
                    await self._let_go(tenant_id)  # the write may or may not have landed
                    for _, done in batch:
                        if not done.done():  # its caller may have gone (cancelled)
                            done.set_exception(error)
                    continue
                for (_, done), result in zip(batch, results, strict=True):
                    if not done.done():
                        done.set_result(result)
        finally:
            # No await since the last empty pop: nothing can have been queued unseen.
            self._draining.discard(tenant_id)
            hold = self._holds.get(tenant_id)
            if hold is not None:
                asyncio.get_running_loop().call_later(LINGER_S, self._linger_over, tenant_id, hold)

    async def _apply(self, tenant_id: str, changes: list[_Change]) -> list[QuotaClaim]:
        hold = await self._hold(tenant_id)
        claims, generations, owners = dict(hold.claims), dict(hold.generations), dict(hold.owners)
        results = []
        for change in changes:
            admitted = change.apply(claims, generations, owners)
            mine = 0 if change.user is None else user_gpus(claims, owners, change.user.user_id)
            results.append(QuotaClaim(admitted, len(claims), sum(claims.values()), mine))
        if (claims, generations, owners) != (hold.claims, hold.generations, hold.owners):
            await self._usage.update_one(
                {"_id": tenant_id},
                {"$set": {"claims": claims, "generations": generations, "owners": owners,
                          "count": len(claims), "gpus": sum(claims.values())}},
            )  # fmt: skip
            hold.claims, hold.generations, hold.owners = claims, generations, owners
        return results

    # --- the lock ------------------------------------------------------------------

    async def _hold(self, tenant_id: str) -> _Hold:
        """The tenant's lock, held by this replica, with the document as stored."""
        hold = self._holds.get(tenant_id)
        if hold is not None and time.monotonic() < hold.until:
            return hold
        if hold is not None:  # held its full time: give others waiting a turn
            await self._let_go(tenant_id)
            await asyncio.sleep(random.uniform(0.005, 0.015))
        token = await self._locks.acquire(_lock_id(tenant_id))
        until = time.monotonic() + HOLD_S
        try:
            doc = await self._seeded(tenant_id)
        except BaseException:
            await self._locks.release(_lock_id(tenant_id), token)
            raise
        hold = _Hold(
            token, until, dict(doc.get("claims") or {}), dict(doc.get("generations") or {}),
            dict(doc.get("owners") or {}),
        )  # fmt: skip
        self._holds[tenant_id] = hold
        return hold

    def _linger_over(self, tenant_id: str, hold: _Hold) -> None:
        if self._holds.get(tenant_id) is hold and tenant_id not in self._draining:
            self._spawn(self._let_go(tenant_id))

    async def _let_go(self, tenant_id: str) -> None:
        # Forgotten before the await, so no change can use a lock being given back.
        hold = self._holds.pop(tenant_id, None)
        if hold is not None:
            await self._locks.release(_lock_id(tenant_id), hold.token)

    async def _seeded(self, tenant_id: str) -> Document:
        doc = await self._usage.find_one({"_id": tenant_id})
        if doc is not None:
            return doc
        # First use, or a data directory from before: seed from the old claim documents.
        claims = {
            claim["_id"].partition("/")[2]: int(claim["gpus"])
            async for claim in self._old_claims.find({"tenant_id": tenant_id})
        }
        seed: Document = {"_id": tenant_id, "count": len(claims), "gpus": sum(claims.values()),
                          "claims": claims}  # fmt: skip
        await self._usage.insert_one(seed)
        await self._old_claims.delete_many({"tenant_id": tenant_id})
        return seed

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def _lock_id(tenant_id: str) -> str:
    return f"lock:{tenant_id}"
