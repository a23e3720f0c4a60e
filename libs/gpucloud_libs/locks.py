"""Leased locks on any MongoDB-wire store, one document per lock.

FerretDB applies an update as a read, then a write, so no conditional update can
make two writers take turns; the insert of a document with a unique `_id` is atomic
on every MongoDB-wire store, and that is the lock. A holder that dies loses it once
it is older than `ttl`: holders must finish well inside that.
"""

from __future__ import annotations

import asyncio
import random
import secrets
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta

from pymongo.errors import DuplicateKeyError

from .clock import aware, now
from .errors import DependencyUnavailable
from .mongo import Collection, Document


class LeasedLocks:
    def __init__(
        self, collection: Collection[Document], *, ttl: timedelta, wait_s: float, busy: str
    ) -> None:
        """`busy` is the 503's message for a caller that waited `wait_s` in vain."""
        self._locks = collection
        self._ttl = ttl
        self._wait_s = wait_s
        self._busy = busy

    async def acquire(self, key: str) -> str:
        """Take the lock `key`; the token returned gives it back."""
        token = secrets.token_hex(8)
        deadline = time.monotonic() + self._wait_s
        while True:
            try:
                await self._locks.insert_one({"_id": key, "token": token, "at": now()})
                return token
            except DuplicateKeyError:
                held = await self._locks.find_one({"_id": key})
                if held is not None and aware(held["at"]) < now() - self._ttl:
                    await self._locks.delete_one({"_id": key, "token": held["token"]})
                if time.monotonic() > deadline:
                    raise DependencyUnavailable(self._busy, retry_after_s=1) from None
                await asyncio.sleep(random.uniform(0.002, 0.01))

    async def release(self, key: str, token: str) -> None:
        """Give the lock back, unless it was taken over after its lease ran out."""
        await self._locks.delete_one({"_id": key, "token": token})

    @asynccontextmanager
    async def held(self, key: str) -> AsyncIterator[None]:
        token = await self.acquire(key)
        try:
            yield
        finally:
            await self.release(key, token)
