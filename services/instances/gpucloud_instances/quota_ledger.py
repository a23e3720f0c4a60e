"""Each tenant's quota usage, exact under concurrent starts, on any MongoDB-wire store.

One document per tenant, `{count, gpus, claims: {instance id: gpus}, owners: {instance
id: user id}, projects: {instance id: project}}`, holds every admitted workload that is
not yet terminal, the user each was started by (a user's own GPU limit counts theirs)
and its project (a project's share counts its own; a claim with none is `default`'s).
FerretDB applies an update as a read,
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
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any, NamedTuple

from pymongo import ASCENDING, IndexModel

from gpucloud_libs.locks import LeasedLocks
from gpucloud_libs.mongo import Database, Document, IndexPlan
from gpucloud_libs.naming import DEFAULT_PROJECT

from .admission import Claimant, Held, claim_refusal
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
    """A claim's outcome, and what the tenant holds right after it (with its user's and
    its project's GPUs; 0 for a claim that names no user)."""

    admitted: bool
    held: Held


class TenantUsage(NamedTuple):
    """What a tenant holds: workloads and GPUs, and the GPUs of each user and each
    project that holds any."""

    workloads: int
    gpus: int
    users: dict[str, int]
    projects: dict[str, int]


class Usages(NamedTuple):
    """Every tenant's (instances, GPUs) held, and the GPUs of every (tenant, user) and
    every (tenant, project) that holds any."""

    tenants: dict[str, tuple[int, int]]
    users: dict[tuple[str, str], int]
    projects: dict[tuple[str, str], int]


@dataclass
class _Book:
    """A tenant's claims as its document holds them."""

    claims: dict[str, int]
    #: The configuration generation each resized claim is for (services only).
    generations: dict[str, int]
    #: The user each claim is for, where it names one.
    owners: dict[str, str]
    #: The project each claim is in, where it is not `default`.
    projects: dict[str, str]

    @classmethod
    def of(cls, doc: Document) -> _Book:
        return cls(*(dict(doc.get(name) or {}) for name in _BOOK_FIELDS))

    def copy(self) -> _Book:
        return _Book(*(dict(getattr(self, name)) for name in _BOOK_FIELDS))

    def project_of(self, key: str) -> str:
        return self.projects.get(key, DEFAULT_PROJECT)

    def usage(self) -> TenantUsage:
        found = TenantUsage(len(self.claims), sum(self.claims.values()), {}, {})
        for key, gpus in self.claims.items():
            if key in self.owners:
                found.users[self.owners[key]] = found.users.get(self.owners[key], 0) + gpus
            project = self.project_of(key)
            found.projects[project] = found.projects.get(project, 0) + gpus
        return found

    def held(self, who: Claimant | None = None, *, besides: str | None = None) -> Held:
        """What the tenant holds besides the claim `besides` (the one being changed),
        with the GPUs of `who`'s user and of its project."""
        count = gpus = user = project = 0
        for key, claimed in self.claims.items():
            if key == besides:
                continue
            count, gpus = count + 1, gpus + claimed
            if who is None:
                continue
            if who.user_id is not None and self.owners.get(key) == who.user_id:
                user += claimed
            if self.project_of(key) == who.project:
                project += claimed
        return Held(count, gpus, user, project)


_BOOK_FIELDS = ("claims", "generations", "owners", "projects")


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
    #: Whose claim it is, held to their own limit and their project's share too.
    who: Claimant | None = None

    def apply(self, book: _Book) -> bool:
        key = self.instance_id
        if self.quota is None:
            book.generations.pop(key, None)
            book.owners.pop(key, None)
            book.projects.pop(key, None)
            return book.claims.pop(key, None) is not None
        if self.generation is not None and book.generations.get(key, 0) > self.generation:
            return True  # a newer generation's claim stands
        held = book.claims.get(key)
        if held is not None and (not self.resize or held == self.gpus):
            self._note_generation(book.generations)
            return True  # a retried claim that went through
        if not self.in_force and self.gpus > (held or 0):
            others = book.held(self.who, besides=key)
            if claim_refusal(self.quota, self.who, others, wanted=self.gpus) is not None:
                return False
        book.claims[key] = self.gpus
        if self.who is not None:
            if self.who.user_id is not None:
                book.owners[key] = self.who.user_id
            if self.who.project != DEFAULT_PROJECT:
                book.projects[key] = self.who.project
        self._note_generation(book.generations)
        return True

    def _note_generation(self, generations: dict[str, int]) -> None:
        if self.generation is not None:
            generations[self.instance_id] = self.generation


@dataclass
class _Hold:
    """A tenant's lock this replica holds, and the document as it last wrote it."""

    token: str
    until: float  # time.monotonic()
    book: _Book


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
        who: Claimant | None = None,
    ) -> QuotaClaim:  # fmt: skip
        """Claim `gpus` and one instance if they fit the quota (and `who`'s caps: the
        user's own limit, the project's share). Claims are keyed by instance, so a
        retried claim for the same instance counts once."""
        return await self._change(tenant_id, _Change(instance_id, gpus, quota, who=who))

    async def resize(
        self, tenant_id: str, instance_id: str, gpus: int, quota: QuotaDoc, *, generation: int,
        who: Claimant | None = None,
    ) -> QuotaClaim:  # fmt: skip
        """Hold `gpus` for a claim, made or not yet, for configuration `generation`: a
        growth must fit the quota, a shrink always passes; an older generation's never
        replaces a newer one's."""
        change = _Change(instance_id, gpus, quota, resize=True, generation=generation, who=who)
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
        users and projects holds, in one read (advisory, as `usage`)."""
        found = Usages({}, {}, {})
        async for doc in self._usage.find({}, dict.fromkeys(_BOOK_FIELDS, 1)):
            tenant_id, held = doc["_id"], _Book.of(doc).usage()
            found.tenants[tenant_id] = (held.workloads, held.gpus)
            found.users.update({(tenant_id, user): gpus for user, gpus in held.users.items()})
            found.projects.update(
                {(tenant_id, project): gpus for project, gpus in held.projects.items()}
            )
        return found

    async def tenant_usage(self, tenant_id: str) -> TenantUsage:
        """What the tenant holds, with each of its users' and projects' GPUs, as last
        written (advisory, as `usage`)."""
        return _Book.of(await self._usage.find_one({"_id": tenant_id}) or {}).usage()

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
        book = hold.book.copy()
        results = []
        for change in changes:
            admitted = change.apply(book)
            results.append(QuotaClaim(admitted, book.held(change.who)))
        if book != hold.book:
            await self._usage.update_one(
                {"_id": tenant_id},
                {"$set": {**asdict(book), "count": len(book.claims),
                          "gpus": sum(book.claims.values())}},
            )  # fmt: skip
            hold.book = book
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
        hold = _Hold(token, until, _Book.of(doc))
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
